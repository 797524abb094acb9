// The voice panel's conversation: one bubble per user turn (keyed by its item id)
// and per answer (keyed by its response id), their tags (interrupted, cancelled…)
// and the struck-through end of an answer the user did not hear. `saved()` and
// `show()` carry what it shows across a reload (call-memory.js).

export class Conversation {
  constructor(log) {
    this.log = log;
    this.bubbles = new Map();
  }

  user(itemId) {
    return this.bubble(`u:${itemId}`, "user", "voice-user-transcript", "You");
  }

  assistant(responseId) {
    return this.bubble(`a:${responseId}`, "assistant", "voice-assistant-transcript", "livegen");
  }

  /** The answer's bubble if it has one (it may have been shown before the panel knew of it). */
  answer(responseId) {
    return this.bubbles.get(`a:${responseId}`);
  }

  /** Tag an answer (interrupted, cancelled…); `unlessTagged` keeps a tag it has. */
  tag(responseId, status, unlessTagged = false) {
    const bubble = this.answer(responseId);
    if (!bubble || (unlessTagged && bubble.dataset.status)) return;
    bubble.dataset.status = status;
    bubble.querySelector(".tag").textContent = status;
  }

  /** An interrupted answer: what was heard stays, the rest is struck through. */
  showHeard(responseId, heard) {
    const bubble = this.answer(responseId);
    if (!bubble) return;
    const text = bubble.querySelector(".text");
    const full = text.textContent;
    if (!full.startsWith(heard) || heard.length >= full.length) return;
    text.replaceChildren(heard, unheardPart(full.slice(heard.length)));
  }

  /** What it shows, as plain data (`show` shows it again). */
  saved() {
    return [...this.bubbles].map(([key, bubble]) => {
      const text = bubble.querySelector(".text");
      const unheard = text.querySelector(".unheard")?.textContent || "";
      return {
        key,
        text: text.textContent.slice(0, text.textContent.length - unheard.length),
        unheard,
        tag: bubble.querySelector(".tag").textContent,
        status: bubble.dataset.status || null,
        isPending: bubble.classList.contains("pending"),
      };
    });
  }

  /** Show `saved()`'s bubbles again; answers the ids of the answers that were interrupted. */
  show(saved) {
    const interrupted = [];
    for (const entry of saved) {
      const id = entry.key.slice(2);
      const bubble = entry.key.startsWith("u:") ? this.user(id) : this.assistant(id);
      bubble.classList.toggle("pending", entry.isPending);
      bubble.querySelector(".tag").textContent = entry.tag;
      if (entry.status) bubble.dataset.status = entry.status;
      if (entry.status === "interrupted") interrupted.push(id);
      const parts = entry.unheard ? [entry.text, unheardPart(entry.unheard)] : [entry.text];
      bubble.querySelector(".text").replaceChildren(...parts);
    }
    return interrupted;
  }

  bubble(key, role, testId, who) {
    let bubble = this.bubbles.get(key);
    if (!bubble) {
      bubble = document.createElement("div");
      bubble.className = `bubble ${role}`;
      bubble.dataset.testid = testId;
      bubble.innerHTML = '<span class="who"></span><span class="tag"></span><p class="text"></p>';
      bubble.querySelector(".who").textContent = who;
      this.bubbles.set(key, bubble);
      this.log.querySelector(".empty")?.remove();
      this.log.append(bubble);
    }
    this.log.scrollTop = this.log.scrollHeight;
    return bubble;
  }
}

/** The struck-through end of an interrupted answer. */
function unheardPart(words) {
  const unheard = document.createElement("span");
  unheard.className = "unheard";
  unheard.title = "not heard: cut from the conversation history";
  unheard.textContent = words;
  return unheard;
}
