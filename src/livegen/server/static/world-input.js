// The world panel's input (world.js): keys, the mouse over the canvas, and letting go on blur.
// Direction keys set the panel's move track (its new value on press, its "none" on release: the
// tracks are sticky); a model's `livegen.keys.v1` track gets the held keys, its `livegen.mouse.v1`
// track drags and wheel over the canvas. What goes where is the panel's tracks (in a shared world,
// the ones this page's player steers); each change is a `world.event` the panel sends.

const KEYS = {
  ArrowUp: "up",
  KeyW: "up",
  ArrowDown: "down",
  KeyS: "down",
  ArrowLeft: "left",
  KeyA: "left",
  ArrowRight: "right",
  KeyD: "right",
};
// Keys sent on a model's `livegen.keys.v1` track (as KeyboardEvent.code): the server turns a
// press and release within one chunk into a tap, so a quick tap is never lost.
const KEY_CODES = new Set([...Object.keys(KEYS), "Space", "ShiftLeft"]);
export const KEYS_SCHEMA = "livegen.keys.v1";
// A model's `livegen.mouse.v1` track gets drags and wheel over the canvas, summed and sent at
// most this often (the server sums them again over a chunk).
export const MOUSE_SCHEMA = "livegen.mouse.v1";
const MOUSE_FLUSH_MS = 100;

/** Listen for the panel's keys and mouse; the canvas is where drags and wheel count. */
export function listenForInput(panel, canvas) {
  canvas.addEventListener("pointermove", (event) => onPointer(panel, event, event.movementX, event.movementY));
  canvas.addEventListener("pointerdown", (event) => onPointer(panel, event, 0, 0));
  canvas.addEventListener("pointerup", (event) => onPointer(panel, event, 0, 0));
  canvas.addEventListener("wheel", (event) => onWheel(panel, event), { passive: false });
  window.addEventListener("keydown", (event) => onKey(panel, event, true));
  window.addEventListener("keyup", (event) => onKey(panel, event, false));
  window.addEventListener("blur", () => releaseAll(panel));
}

function onKey(panel, event, isDown) {
  if (panel.keysTrack && panel.ws && KEY_CODES.has(event.code)) {
    if (event.target.closest?.("input, textarea, select")) return;
    event.preventDefault();
    if (isDown && event.repeat) return;
    panel.heldCodes = panel.heldCodes.filter((code) => code !== event.code);
    if (isDown) panel.heldCodes.push(event.code);
    sendKeys(panel);
    return;
  }
  const direction = KEYS[event.code];
  if (!direction || !panel.moveTrack || !panel.ws) return;
  if (event.target.closest?.("input, textarea, select")) return;
  event.preventDefault();
  if (isDown && event.repeat) return;
  panel.held = panel.held.filter((held) => held !== direction);
  if (isDown) panel.held.push(direction);
  panel.setControl(panel.moveTrack, panel.held.at(-1) ?? panel.moveTrack.rest);
}

function onPointer(panel, event, dx, dy) {
  if (!panel.mouseTrack || !panel.ws) return;
  const mouse = panel.mouse;
  mouse.buttons = event.buttons;
  if (event.buttons) {
    mouse.dx += dx;
    mouse.dy += dy;
  }
  queueMouse(panel);
}

function onWheel(panel, event) {
  if (!panel.mouseTrack || !panel.ws) return;
  event.preventDefault();
  panel.mouse.wheel += Math.sign(event.deltaY);
  queueMouse(panel);
}

function queueMouse(panel) {
  const mouse = panel.mouse;
  const changed = mouse.dx || mouse.dy || mouse.wheel || mouse.buttons !== mouse.sentButtons;
  if (!changed || mouse.timer !== null) return;
  mouse.timer = setTimeout(() => flushMouse(panel), MOUSE_FLUSH_MS);
}

function flushMouse(panel) {
  const mouse = panel.mouse;
  mouse.timer = null;
  if (!panel.mouseTrack || panel.stats.state !== "live") return;
  const data = { dx: mouse.dx, dy: mouse.dy, wheel: mouse.wheel, buttons: mouse.buttons & 31 };
  mouse.dx = mouse.dy = mouse.wheel = 0;
  mouse.sentButtons = data.buttons;
  panel.sendEvent({ controls: [{ track: panel.mouseTrack.name, schema: MOUSE_SCHEMA, data }] });
}

function sendKeys(panel) {
  if (!panel.keysTrack || panel.stats.state !== "live") return;
  const data = { down: [...panel.heldCodes] };
  panel.sendEvent({ controls: [{ track: panel.keysTrack.name, schema: KEYS_SCHEMA, data }] });
}

function releaseAll(panel) {
  if (panel.heldCodes.length) {
    panel.heldCodes = [];
    sendKeys(panel);
  }
  panel.held = [];
  if (panel.moveTrack) panel.setControl(panel.moveTrack, panel.moveTrack.rest);
}
