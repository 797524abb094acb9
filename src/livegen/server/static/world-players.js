// Shared worlds on the page (docs/world-protocol.md, "Shared worlds: players"): the owner's
// "Invite a player" asks the server for a player token (`session.player_token`) and shows a page
// link, `/?join=ID&token=T`; a page opened with that link joins the world as the next player
// over the /v1/worlds WebSocket (joining is WebSocket-only) and steers the tracks the server gave
// it. The button shows only where the session's capabilities say the model takes more than one
// player. The panel (world.js) owns the session; this module owns the invite and the join link.

const PARAMS = new URLSearchParams(window.location.search);

/** The join link this page was opened with (`?join=ID&token=T`), or null. */
export function joinLink() {
  const join = PARAMS.get("join");
  return join ? { join, token: PARAMS.get("token") || "" } : null;
}

/** The owner's invite: the button, and the link it shows once the server has made a token. */
export class Invite {
  /** `send(event)`: a client event on the owner's session (WebSocket or the call's channel). */
  constructor(root, status, stats, send) {
    this.status = status;
    this.stats = stats;
    this.send = send;
    this.button = root.querySelector("[data-testid=world-invite]");
    this.box = root.querySelector(".invite");
    this.link = root.querySelector("[data-testid=world-invite-link]");
    this.copyButton = root.querySelector("[data-testid=world-invite-copy]");
    this.button.addEventListener("click", () => this.ask());
    this.copyButton.addEventListener("click", () => this.copy());
  }

  /** A live session the page owns: offer the invite where its model takes more than one player. */
  show(capabilities) {
    this.button.hidden = !((capabilities?.players ?? 1) > 1);
    this.button.disabled = false;
  }

  hide() {
    this.button.hidden = true;
    this.box.hidden = true;
    this.link.value = "";
  }

  ask() {
    this.button.disabled = true; // until the token comes back
    this.status.set("World: asking the server for a player token…", "busy");
    this.send({ type: "session.player_token" });
  }

  /** `session.player_token.created`: the page link a second player opens (a new one replaces it). */
  onCreated(event) {
    this.button.disabled = false;
    const url = new URL("/", window.location.href);
    url.search = new URLSearchParams({ join: event.session_id, token: event.token }).toString();
    this.link.value = url.href;
    this.box.hidden = false;
    this.link.select();
    this.stats.inviteLink = url.href;
    const until = event.expires_at ? ` until ${new Date(event.expires_at * 1000).toLocaleTimeString()}` : "";
    this.status.set(`World: invite link ready${until}: copy it to the second player`, "ok");
  }

  /** An invite the server refused (e.g. the model takes one player). */
  onRefused() {
    this.button.disabled = false;
  }

  async copy() {
    try {
      await navigator.clipboard.writeText(this.link.value);
    } catch {
      // No clipboard API off localhost over plain HTTP: copy the selected text the old way.
      this.link.select();
      document.execCommand("copy");
    }
    this.status.set("World: invite link copied", "ok");
  }
}
