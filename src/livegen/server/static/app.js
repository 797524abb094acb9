// The page's entry: find the server's models (asking for the API key when it
// needs one), then hand each panel its model. The panels own their sessions;
// this module owns only the key form and the status line.

import { api, AuthError, StatusLine } from "./connection.js";
import { VoicePanel } from "./voice.js";
import { WorldPanel } from "./world.js";

const status = new StatusLine(document.querySelector("[data-testid=status]"));
const voice = new VoicePanel(document.querySelector("#voice"), status);
const world = new WorldPanel(document.querySelector("#world"), status);
const keyPanel = document.querySelector("#key-panel");
const keyForm = document.querySelector("#key-form");
const keyInput = document.querySelector("[data-testid=api-key]");
const keyHint = document.querySelector("#key-hint");

// For tests and the curious: live counters of both panels.
window.livegen = {
  get voice() {
    return voice.stats;
  },
  get world() {
    return world.stats;
  },
  models: [],
};

function pick(models, kind) {
  return models.find((model) => model.kind === kind && model.available !== false) || null;
}

async function connect() {
  status.set("Connecting to the server…", "busy");
  let body;
  try {
    body = await api.getJSON("/v1/models");
  } catch (error) {
    if (error instanceof AuthError) {
      askForKey(api.key ? "That key was refused. Try again." : "This server needs an API key.");
      status.set(`Locked: ${error.message}`, "warn");
      return;
    }
    status.set(`Cannot reach the server: ${error.message}`, "error");
    return;
  }
  keyPanel.hidden = true;
  window.livegen.models = body.data || [];
  const voiceModel = pick(window.livegen.models, "voice");
  const worldModel = pick(window.livegen.models, "world");
  voice.setModel(voiceModel);
  world.setModel(worldModel);
  const served = [voiceModel, worldModel].filter(Boolean).map((model) => model.id);
  status.set(served.length ? `Ready: ${served.join(" and ")}` : "Connected, but this server has no models", "ok");
}

function askForKey(hint) {
  keyPanel.hidden = false;
  keyHint.textContent = hint;
  voice.setModel(null);
  world.setModel(null);
  keyInput.focus();
}

keyForm.addEventListener("submit", (event) => {
  event.preventDefault();
  api.setKey(keyInput.value.trim());
  keyInput.value = "";
  connect();
});

connect();
