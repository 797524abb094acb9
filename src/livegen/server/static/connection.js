// The page's link to the server: the API key, fetch and WebSocket addresses,
// and the status line that says in words what is going on.
//
// Both panels go through `api` so the key is asked for once: a browser cannot
// set headers on a WebSocket, so the key travels as the
// `openai-insecure-api-key.<key>` subprotocol there and as a Bearer header on
// fetch, the way OpenAI's browser clients send it.
//
// Voice calls over WebRTC carry only an ephemeral key (`ek_...`), minted per
// call: from the operator's token endpoint when the page is opened with
// `?token_endpoint=<url>` (the page then never sees the server's key), else
// from /v1/realtime/client_secrets with the key typed above (or none).

const KEY_STORAGE = "livegen.apiKey";
const KEY_SUBPROTOCOL_PREFIX = "openai-insecure-api-key.";

export class AuthError extends Error {
  constructor(message = "the server needs an API key") {
    super(message);
    this.name = "AuthError";
  }
}

const PARAMS = new URLSearchParams(window.location.search);

class Api {
  constructor() {
    this.key = sessionStorage.getItem(KEY_STORAGE) || null;
    /** The operator's endpoint that mints ephemeral keys (POST, answers OpenAI's shape), or null. */
    this.tokenEndpoint = PARAMS.get("token_endpoint");
    /** "webrtc" (the default, falling back to the WebSocket) or "websocket" (`?transport=websocket`). */
    this.transport = PARAMS.get("transport") === "websocket" ? "websocket" : "webrtc";
  }

  /** A fresh ephemeral key for a voice call, bound to `session`. */
  async ephemeralKey(session) {
    const request = this.tokenEndpoint
      ? fetch(this.tokenEndpoint, { method: "POST", cache: "no-store" })
      : fetch("/v1/realtime/client_secrets", {
          method: "POST",
          cache: "no-store",
          headers: { ...this.headers(), "Content-Type": "application/json" },
          body: JSON.stringify({ session }),
        });
    const response = await request;
    if (response.status === 401) throw new AuthError("the key was refused when asking for an ephemeral key");
    if (!response.ok) throw new Error(`the ephemeral key request answered HTTP ${response.status}`);
    const body = await response.json();
    const value = body.value ?? body.client_secret?.value;
    if (typeof value !== "string") throw new Error("the token endpoint gave no ephemeral key");
    return value;
  }

  setKey(key) {
    this.key = key || null;
    if (this.key) sessionStorage.setItem(KEY_STORAGE, this.key);
    else sessionStorage.removeItem(KEY_STORAGE);
  }

  headers() {
    return this.key ? { Authorization: `Bearer ${this.key}` } : {};
  }

  async getJSON(path) {
    const response = await fetch(path, { headers: this.headers(), cache: "no-store" });
    if (response.status === 401) throw new AuthError(this.key ? "the API key was refused" : undefined);
    if (!response.ok) throw new Error(`${path} answered HTTP ${response.status}`);
    return response.json();
  }

  wsUrl(path, params = {}) {
    const url = new URL(path, window.location.href);
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    for (const [name, value] of Object.entries(params)) {
      if (value != null) url.searchParams.set(name, value);
    }
    return url.href;
  }

  subprotocols(extra = []) {
    return this.key ? [...extra, KEY_SUBPROTOCOL_PREFIX + this.key] : [...extra];
  }

  /** A WebSocket with the key attached; throws a worded Error when the browser refuses it. */
  openSocket(path, params = {}, extraProtocols = []) {
    try {
      return new WebSocket(this.wsUrl(path, params), this.subprotocols(extraProtocols));
    } catch (error) {
      if (error.name === "SyntaxError" && this.key) {
        throw new Error("this API key has characters a browser cannot send over a WebSocket");
      }
      throw error;
    }
  }
}

export const api = new Api();

const CLOSE_WORDS = {
  1000: "the server ended the session",
  1001: "the server went away",
  1006: "the connection was lost or refused (is the server running, and is the API key right?)",
  1008: "the server refused the session",
  1011: "the server hit an error",
  1012: "the server is restarting or shutting down",
  1013: "the server is busy: try again in a moment",
  4001: "the session was resumed on another connection",
  4002: "the server closed a client that was not reading its output",
  4003: "nothing was sent after connecting",
};

/** Words for a WebSocket close, for the status line. */
export function describeClose(event) {
  const words = CLOSE_WORDS[event.code] || `the server closed the connection (code ${event.code})`;
  return event.reason ? `${words}: ${event.reason}` : words;
}

/** The status pill at the top: the latest thing worth saying, with its level. */
export class StatusLine {
  constructor(root) {
    this.root = root;
    this.text = root.querySelector(".status-text");
  }

  set(message, level = "info") {
    this.root.dataset.level = level;
    this.text.textContent = message;
    this.root.title = message;
  }
}

/** Base64 of bytes, in slices so large buffers do not overflow the argument list. */
export function bytesToBase64(bytes) {
  let binary = "";
  const slice = 0x8000;
  for (let i = 0; i < bytes.length; i += slice) {
    binary += String.fromCharCode.apply(null, bytes.subarray(i, i + slice));
  }
  return btoa(binary);
}

export function base64ToBytes(text) {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i += 1) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

export function median(values) {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
}
