// Reading the "New run" form into the JSON POST /api/runs/ takes, and showing the API's
// field errors next to the fields they name.

export function readForm(form) {
  const body = {};
  for (const input of form.elements) {
    if (!input.name || input.disabled) continue;
    if (input.type === "checkbox") body[input.name] = input.checked;
    else if (input.value.trim() === "") continue; // empty: let the server use its default
    else if (input.type === "number") body[input.name] = Number(input.value);
    else body[input.name] = input.value.trim();
  }
  return body;
}

// The names of the fields the user changed from what the page was served with.
export function changedNames(form) {
  const changed = new Set();
  for (const input of form.elements) {
    if (!input.name || input.disabled) continue;
    const before =
      input.type === "checkbox"
        ? input.defaultChecked
        : input.tagName === "SELECT"
          ? ([...input.options].find((o) => o.defaultSelected) || input.options[0])?.value
          : input.defaultValue;
    const now = input.type === "checkbox" ? input.checked : input.value;
    if (now !== before) changed.add(input.name);
  }
  return changed;
}

export function clearFieldErrors(form) {
  form.querySelectorAll(".field .error").forEach((e) => {
    e.textContent = "";
    e.hidden = true;
  });
  form.querySelectorAll("[aria-invalid]").forEach((e) => e.removeAttribute("aria-invalid"));
}

function messages(value) {
  if (Array.isArray(value)) return value.map(messages).join(" ");
  if (value && typeof value === "object") return Object.values(value).map(messages).join(" ");
  return String(value);
}

// errors: {field: [messages]} (DRF style) possibly nested under "errors"/"fields"; returns the
// text of errors that name no field of the form, for a form-level message.
export function showFieldErrors(form, errors) {
  const data = errors.errors || errors.fields || errors;
  const rest = [];
  for (const [name, value] of Object.entries(data)) {
    const box = form.querySelector(`.error#e-${CSS.escape(name)}`);
    if (!box) {
      if (!["status", "code"].includes(name)) rest.push(name === "detail" || name === "message" || name === "non_field_errors" ? messages(value) : `${name}: ${messages(value)}`);
      continue;
    }
    box.textContent = messages(value);
    box.hidden = false;
    const input = form.elements.namedItem(name);
    if (input) input.setAttribute("aria-invalid", "true");
  }
  return rest.join(" ");
}
