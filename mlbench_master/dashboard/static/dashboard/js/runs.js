// Runs page: the live list of runs and the "New run" form.

import { api, every, rows } from "./api.js";
import { algorithmText, datasetBadge, el, implementationText, stateBadge, timeToTarget, when } from "./format.js";
import { changedNames, showFieldErrors, clearFieldErrors, readForm } from "./form.js";
import { algorithmChoices, backendChoices, datasetChoices, defaultBackend, isMeasurementTask, refusedFields } from "./form_rules.js";
import { isMeasurement } from "./backend_benchmark.js";

const body = document.querySelector("#runs-table tbody");
const status = document.getElementById("runs-status");

function runRow(run) {
  const reason = run.reason ? el("div", { class: "reason", text: run.reason }) : null;
  const cpus = run.num_cpus ? ` × ${run.num_cpus} CPU` : "";
  return el(
    "tr",
    { dataset: { runId: run.id } },
    el(
      "td",
      {},
      el("a", { href: `/runs/${run.id}/`, class: "run-link" }, run.name || `run ${run.id}`),
      ...(run.series ? [el("div", {}, el("a", { href: `/series/${run.series}/`, class: "series-link", text: `series ${run.series}, seed ${run.seed}` }))] : []),
    ),
    el(
      "td",
      { text: run.task || "—" },
      ...(algorithmText(run) ? [el("div", { class: "algorithm", text: algorithmText(run) })] : []),
      ...(implementationText(run) ? [el("div", { class: "implementation", text: implementationText(run) })] : []),
    ),
    el("td", { class: "state-cell" }, stateBadge(run.state), run.queue_position ? el("span", { class: "queue-position", text: ` #${run.queue_position} in the queue` }) : "", reason),
    el("td", { text: `${run.num_workers ?? "—"}${cpus}` }),
    el("td", {}, isMeasurement(run) ? "—" : datasetBadge(run)), // a measurement reads no data
    el("td", { text: timeToTarget(run) }),
    el("td", {}, el("time", { datetime: run.created_at, text: when(run.created_at) })),
  );
}

// What the form last created ("Run <link> was created."): kept in the status line by every
// refresh, which would otherwise replace it with the count a moment after it appeared.
let created = [];

// A page of the list at a time (GET /api/runs/?limit=&offset=, newest first): the whole
// list of a large installation is tens of megabytes, and a table of thousands of rows
// helps nobody. "Newer" and "Older" move by a page; a refresh keeps the page shown.
const PAGE = 50;
let offset = 0;
const pager = document.getElementById("runs-pager");
const newer = document.getElementById("runs-newer");
const older = document.getElementById("runs-older");

async function refresh() {
  const page = await api("/api/runs/", { params: { limit: PAGE, offset } });
  const runs = rows(page);
  if (!runs.length && offset > 0) {
    offset = Math.max(0, Math.floor((page.count - 1) / PAGE) * PAGE); // runs went meanwhile
    return refresh();
  }
  body.replaceChildren(...runs.map(runRow));
  const total = page.count ?? runs.length;
  const whole = offset === 0 && total <= runs.length;
  const count = !runs.length
    ? "No runs yet. Start one with “New run”."
    : whole
      ? `${runs.length} run${runs.length === 1 ? "" : "s"}.`
      : `Runs ${offset + 1}–${offset + runs.length} of ${total.toLocaleString("en")}, newest first.`;
  status.replaceChildren(...created, created.length ? ` ${count}` : count);
  pager.hidden = whole;
  newer.disabled = offset === 0;
  older.disabled = page.next_offset === null || page.next_offset === undefined;
  document.body.dataset.loaded = "1";
}

function turn(by) {
  offset = Math.max(0, offset + by);
  refresh().catch((err) => console.warn(err.message));
}
newer.addEventListener("click", () => turn(-PAGE));
older.addEventListener("click", () => turn(PAGE));

// ---- the "New run" form ----
const toggle = document.getElementById("new-run-toggle");
const panel = document.getElementById("new-run");
const form = document.getElementById("new-run-form");
const formError = document.getElementById("form-error");

function openForm(open) {
  panel.hidden = !open;
  toggle.setAttribute("aria-expanded", String(open));
  if (open) form.querySelector("input, select").focus();
}

function showFormError(text) {
  formError.textContent = text;
  formError.hidden = !text;
}

// What the form asks for. A run that resumes another gets that run's settings from the
// master for every field left as the page served it, so only the changed ones are sent.
function requestBody() {
  const body = readForm(form);
  // The chosen algorithm's option fields (algorithm_options.<algorithm>.<option>; the
  // others are disabled, so not read) travel as the one object the API takes.
  const options = {};
  for (const [name, value] of Object.entries(body)) {
    if (!name.startsWith("algorithm_options.")) continue;
    options[name.split(".")[2]] = value;
    delete body[name];
  }
  if (Object.keys(options).length) body.algorithm_options = options;
  if (body.resume_from === undefined) return body;
  const changed = changedNames(form);
  return Object.fromEntries(
    Object.entries(body).filter(([name]) => name === "name" || name === "resume_from" || changed.has(name)),
  );
}

// Several seeds, repeats or several worker counts make a series (POST /api/series/, which
// reads "1,2,3" itself); otherwise one run, with its seed and whether it may queue.
function target(body) {
  const many = (text) => typeof text === "string" && text.split(/[\s,]+/).filter(Boolean).length > 1;
  if (many(body.seeds) || many(body.workers) || body.repeats > 1) {
    if (body.workers) delete body.num_workers;
    delete body.queue; // a series always queues
    return { path: "/api/series/", body };
  }
  const { seeds, repeats, workers, ...run } = body;
  if (seeds !== undefined) run.seed = Number(seeds);
  else if (repeats) run.seed = 1; // repeats 1: seed 1, as the series' seeds 1..N
  if (workers !== undefined) run.num_workers = Number(workers);
  if (!run.queue) delete run.queue;
  return { path: "/api/runs/", body: run };
}

// A staff user's own algorithm file: uploaded first (POST /api/algorithms/), then the run
// names it by its hash and takes its NAME and declared defaults (the built-in algorithm
// fields of the form do not apply to it).
async function withUploadedAlgorithm(body) {
  const input = document.getElementById("f-algorithm-file");
  const chosen = input && input.files && input.files[0];
  if (!chosen) return;
  const stored = await api("/api/algorithms/", { method: "POST", file: chosen, type: "text/x-python" });
  body.algorithm_source = stored.sha256;
  delete body.algorithm;
  delete body.algorithm_options;
}

async function submit(event) {
  event.preventDefault();
  clearFieldErrors(form);
  showFormError("");
  // The browser knows the limits (min/max); say what is wrong before asking the server.
  const invalid = [...form.elements].filter((e) => e.name && e.willValidate && !e.checkValidity());
  if (invalid.length) {
    showFieldErrors(form, Object.fromEntries(invalid.map((e) => [e.name, [e.validationMessage]])));
    invalid[0].focus();
    return;
  }
  const button = document.getElementById("new-run-submit");
  button.disabled = true;
  try {
    const { path, body: sent } = target(requestBody());
    await withUploadedAlgorithm(sent);
    const made = await api(path, { method: "POST", body: sent });
    form.reset();
    openForm(false);
    const [what, href] = path === "/api/series/" ? ["Series ", `/series/${made.id}/`] : ["Run ", `/runs/${made.id}/`];
    created = [what, el("a", { href, text: made.name || `#${made.id}` }), made.runs ? ` was created: ${made.runs.length} runs, one after another.` : " was created."];
    status.replaceChildren(...created);
    offset = 0; // the new run is the newest
    await refresh();
  } catch (err) {
    if (err.status === 409) {
      showFormError(`Another run is still active (or runs wait in the queue), and only one run can use the workers at a time. Tick “Queue behind the active run” to start this one after them. (${err.message})`);
    } else if (err.status === 400 && err.data && typeof err.data === "object") {
      // A refused option is said under the algorithm, where its fields are.
      const errors = { ...(err.data.errors || err.data) };
      if (errors.seed) {
        errors.seeds = errors.seed; // one run's seed is typed in Seeds
        delete errors.seed;
      }
      if (errors.source) {
        errors.algorithm_source = errors.source; // the upload's refusal, under its input
        delete errors.source;
      }
      if (errors.algorithm_options) {
        errors.algorithm = [...(errors.algorithm || []), ...errors.algorithm_options];
        delete errors.algorithm_options;
      }
      const rest = showFieldErrors(form, errors);
      if (rest) showFormError(rest);
    } else if (err.status === 401 || err.status === 403) {
      showFormError(`Not allowed: ${err.message}. Sign in again and retry.`);
    } else {
      showFormError(`The run could not be created: ${err.message}`);
    }
  } finally {
    button.disabled = false;
  }
}

if (form) {
  toggle.addEventListener("click", () => openForm(panel.hidden));
  document.getElementById("new-run-cancel").addEventListener("click", () => openForm(false));
  form.addEventListener("submit", submit);
  // The light target is a target: keep the two inputs saying the same thing.
  const light = form.elements.namedItem("light_target");
  const target = form.elements.namedItem("target");
  if (light && target) {
    light.addEventListener("change", () => {
      if (light.checked) target.value = "light";
    });
    target.addEventListener("change", () => {
      light.checked = target.value === "light";
    });
  }
  // Every choice below follows the master's run rules as data (GET /api/runs/defaults/,
  // embedded in the page so the choices are right from the start; read again below for the
  // times), through form_rules.js: the form keeps no list of its own, and never offers what
  // the API would refuse. Each task has its own goals and data sets: only those are offered.
  // A measurement (the backend benchmark) refuses the training fields (`training_only`:
  // goal, data, epochs, checkpoint, algorithm, implementation, schedule): they are disabled
  // (a disabled field is not sent), and its backend may be "every backend" (sent as nothing:
  // the master then measures every backend the workers have).
  let served = JSON.parse(document.getElementById("run-defaults").textContent);
  const task = form.elements.namedItem("task");
  const dataset = form.elements.namedItem("dataset");
  // Only the chosen algorithm's options are shown (and sent); a measurement has none.
  const algorithm = form.elements.namedItem("algorithm");
  const fitAlgorithm = (measuring) => {
    for (const box of form.querySelectorAll(".field[data-algorithm]")) {
      const off = measuring || !algorithm || box.dataset.algorithm !== algorithm.value;
      box.hidden = off;
      box.querySelectorAll("input, select").forEach((input) => (input.disabled = off));
    }
  };
  algorithm?.addEventListener("change", () => fitAlgorithm(false));
  const backend = form.elements.namedItem("backend");
  const fitBackend = (measuring) => {
    if (!backend) return;
    const all = backend.querySelector("option[value='']");
    if (measuring && !all) {
      backend.prepend(el("option", { value: "", text: "every backend" }));
      backend.value = "";
    } else if (!measuring && all) {
      all.remove();
      if (!backend.value) backend.value = served.defaults.backend;
    }
  };
  // What a run of the chosen task gets when the time fields are left empty: the master's
  // table, the same the API applies, shown as placeholders.
  const fitTimes = () => {
    const own = served.tasks[task.value];
    const budget = form.elements.namedItem("time_budget");
    const limit = form.elements.namedItem("time_limit");
    if (!own) return;
    if (budget) budget.placeholder = own.time_budget ? `${own.time_budget} (the task's)` : "";
    if (limit) limit.placeholder = `${own.time_limit} (budget + ${served.time_limit_margin})`;
  };
  api("/api/runs/defaults/").then((body) => {
    served = body;
    fitTimes();
  }, () => {});
  // The implementation (reference, torch-ddp, tensorflow): the chosen task's only; one
  // whose framework the workers lack stays shown but disabled, with its install hint
  // (forms_spec.py). What it runs bounds the other choices: its algorithms only, its
  // backends only (served per device: nccl only with "Use GPUs" ticked), and for one that
  // takes no backend (tensorflow: its framework's own collective ops) the backend field is
  // disabled, so none is sent. While the user has picked no backend, the form selects the
  // one the master would give (torch-ddp: gloo, nccl with GPUs); a backend the user picked
  // is kept while it is allowed.
  const implementation = form.elements.namedItem("implementation");
  const gpu = form.elements.namedItem("gpu_enabled");
  const backendHelp = document.getElementById("h-backend");
  const backendHelpText = backendHelp?.textContent ?? "";
  let backendPicked = false;
  backend?.addEventListener("change", () => (backendPicked = true));
  const fitBackendChoices = () => {
    if (!backend) return;
    const choice = { task: task.value, implementation: implementation?.value, gpu: Boolean(gpu?.checked) };
    const offered = backendChoices(served, choice);
    backend.disabled = !offered.length;
    if (backendHelp) {
      const framework = served.implementations[choice.implementation]?.framework;
      backendHelp.textContent = offered.length ? backendHelpText : `${choice.implementation} all-reduces with ${framework}'s own collective ops: no backend is sent.`;
    }
    if (!offered.length) return;
    for (const option of backend.options) option.disabled = !offered.includes(option.value);
    if (backendPicked && !backend.selectedOptions[0]?.disabled) return;
    backend.value = defaultBackend(served, choice);
    backendPicked = false; // the form chose it: a later change of GPUs or implementation may too
  };
  const fitImplementation = (measuring) => {
    if (implementation && !measuring) {
      // (a measurement has none: the field is disabled, `training_only`)
      const table = served.implementations;
      const offered = served.tasks[task.value]?.implementations ?? Object.keys(table);
      for (const option of implementation.options) {
        option.hidden = !offered.includes(option.value);
        option.disabled = option.hidden || table[option.value]?.available === false;
      }
      if (implementation.selectedOptions[0]?.disabled) implementation.value = served.defaults.implementation;
      if (algorithm) {
        const admitted = algorithmChoices(served, { task: task.value, implementation: implementation.value });
        for (const option of algorithm.options) option.disabled = !admitted.includes(option.value);
        if (algorithm.selectedOptions[0]?.disabled) algorithm.value = [...algorithm.options].find((o) => !o.disabled)?.value ?? algorithm.value;
        fitAlgorithm(false);
      }
    }
    fitBackendChoices();
  };
  implementation?.addEventListener("change", () => fitImplementation(false));
  gpu?.addEventListener("change", () => fitImplementation(isMeasurementTask(served, task.value)));
  const fitTask = () => {
    const own = served.tasks[task.value];
    if (!own) return;
    fitTimes();
    const measuring = isMeasurementTask(served, task.value);
    const refused = refusedFields(served, task.value);
    for (const name of served.training_only) {
      const input = form.elements.namedItem(name);
      if (input) input.disabled = refused.includes(name);
    }
    fitBackend(measuring);
    fitAlgorithm(measuring);
    fitImplementation(measuring);
    if (measuring) return;
    const allowed = { target: own.goals, dataset: datasetChoices(served, task.value) };
    for (const [select, fallback] of [[target, own.target], [dataset, served.defaults.dataset]]) {
      if (!select) continue;
      for (const option of select.options) option.disabled = !allowed[select.name].includes(option.value);
      if (select.selectedOptions[0]?.disabled) select.value = fallback;
    }
    if (light) light.disabled = !allowed.target.includes("light");
  };
  if (task) {
    task.addEventListener("change", fitTask);
    form.addEventListener("reset", () =>
      setTimeout(() => {
        backend?.querySelector("option[value='']")?.remove(); // back to the defaults
        backendPicked = false;
        fitTask();
      }),
    );
    fitTask();
  }
  if (window.location.hash === "#new") openForm(true);
}
every(5000, refresh);
