// The world panel's control tracks: the model's `session.created` controls in one shape, and the
// on-screen buttons for those that take a few named values (the panel sends what they press).

export const DIRECTIONS = ["up", "left", "down", "right"];
const ARROWS = { up: "↑", down: "↓", left: "←", right: "→" };

/** The model's control tracks in one shape, whatever spelling the server used. */
export function normalizeTracks(controls) {
  return (controls || []).map((control) => {
    const jsonSchema =
      control.json_schema || (typeof control.schema === "object" ? control.schema : null) || {};
    const [field, property] =
      Object.entries(jsonSchema.properties || {}).find(([, p]) => Array.isArray(p.enum)) || [];
    return {
      name: control.track ?? control.name,
      schema: typeof control.schema === "string" ? control.schema : (control.schema_id ?? null),
      field: field ?? "action",
      values: property?.enum ?? [],
      rest: control.default?.[field] ?? "none",
      isSticky: control.is_sticky ?? control.sticky ?? true,
      description: control.description ?? "",
    };
  });
}

export function buildPad(panel) {
  panel.el.pad.replaceChildren();
  for (const track of panel.tracks) {
    const values = track === panel.moveTrack ? DIRECTIONS : track.values.filter((v) => v !== track.rest);
    if (!values.length) continue; // free-form tracks (keys, mouse) have no buttons
    const group = document.createElement("div");
    group.className = track === panel.moveTrack ? "dpad" : "buttons";
    group.setAttribute("role", "group");
    group.setAttribute("aria-label", track.description || track.name);
    for (const value of values) {
      const button = document.createElement("button");
      button.type = "button";
      button.className = `pad-${value}`;
      button.dataset.track = track.name;
      button.dataset.value = value;
      button.dataset.testid = `world-control-${value}`;
      button.textContent = ARROWS[value] || value;
      button.title = `${track.name}: ${value}`;
      const press = (event) => {
        event.preventDefault();
        panel.setControl(track, value);
      };
      const release = () => {
        if (panel.actions.get(track.name) === value) panel.setControl(track, track.rest);
      };
      button.addEventListener("pointerdown", press);
      button.addEventListener("pointerup", release);
      button.addEventListener("pointerleave", release);
      group.append(button);
    }
    panel.el.pad.append(group);
  }
}
