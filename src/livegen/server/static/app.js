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

const HEALTH_POLL_MS = 1000;

/** The model each kind of session is served with, from /health (open, and it names what is served). */
async function servedModels() {
  const response = await fetch("/health", { cache: "no-store" });
  const body = await response.json(); // 503 while loading still says what is being loaded
  const services = body.services || {};
  return { voice: servedModel(services.voice), world: servedModel(services.world, WORLD_FULL) };
}

// A loaded world model that is not ready is full (another tab may be using its realtime capacity):
// Start is still offered, and the server's refusal says why, where "loading" would never end.
const WORLD_FULL = new Set(["realtime capacity full", "KV pool full"]);

function servedModel(service, full = new Set()) {
  if (!service) return null;
  const busy = !service.ready && full.has(service.reason) ? service.reason : null;
  return { id: service.model, isReady: Boolean(service.ready) || busy !== null, busy };
}

async function connect() {
  status.set("Connecting to the server…", "busy");
  if (api.tokenEndpoint) {
    // The operator's backend mints ephemeral keys: the page never asks for the server's key.
    keyPanel.hidden = true;
    await showServed();
    return;
  }
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
  await showServed();
}

/** Give each panel its model once the server has loaded it; until then say what is loading. */
async function showServed() {
  let served;
  try {
    served = await servedModels();
  } catch (error) {
    status.set(`Cannot reach the server: ${error.message}`, "error");
    setTimeout(showServed, HEALTH_POLL_MS);
    return;
  }
  voice.setModel(served.voice?.isReady ? served.voice : null, served.voice ? "loading" : "none");
  world.setModel(served.world?.isReady ? served.world : null, served.world ? "loading" : "none");
  const loading = [served.voice, served.world].filter((model) => model && !model.isReady);
  if (loading.length) {
    status.set(`Loading ${loading.map((model) => model.id).join(" and ")}…`, "busy");
    setTimeout(showServed, HEALTH_POLL_MS);
    return;
  }
  const ready = [served.voice, served.world].filter(Boolean).map((m) => (m.busy ? `${m.id} (${m.busy})` : m.id));
  const names = ready.join(" and ");
  const words = ready.length ? `Ready: ${names}` : "Connected, but this server serves no models";
  status.set(words, "ok");
}

function askForKey(hint) {
  keyPanel.hidden = false;
  keyHint.textContent = hint;
  voice.setModel(null, "locked");
  world.setModel(null, "locked");
  keyInput.focus();
}

keyForm.addEventListener("submit", (event) => {
  event.preventDefault();
  api.setKey(keyInput.value.trim());
  keyInput.value = "";
  connect();
});

connect();
