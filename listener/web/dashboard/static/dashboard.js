// The dashboard's one script: live node states over the observer's SSE stream,
// approvals and actions carried out without leaving the page, list pages kept
// fresh, and times shown in the viewer's zone.
// No framework and no build step; the pages work without it (forms post,
// links navigate), this only makes them live.
"use strict";

const FINAL = new Set(["succeeded", "failed", "cancelled", "skipped"]);
const STATE_CLASS = /\bstate-[a-z_]+\b/g;

// What the last action or decision came to, above <main>, so a re-rendered
// page keeps it.
function notify(message, ok) {
  const el = document.getElementById("notice");
  if (!el) return;
  el.textContent = message;
  el.className = ok ? "ok" : "error";
}

// Times arrive as UTC (<time datetime>, UTC in the title): shown in the
// viewer's zone, UTC on hover.
const LOCAL = new Intl.DateTimeFormat(undefined, {
  year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit",
  second: "2-digit", hour12: false, timeZoneName: "short",
});

function localTimes(root) {
  for (const el of root.querySelectorAll("time[datetime]")) {
    const moment = new Date(el.getAttribute("datetime"));
    if (Number.isNaN(moment.getTime())) continue;
    el.textContent = LOCAL.format(moment);
    el.classList.add("local");
  }
}

function setState(el, state) {
  el.setAttribute("class", (el.getAttribute("class") || "").replace(STATE_CLASS, "").trim() + " state-" + state);
}

// A decision posted with fetch: same origin, so the browser sends Origin; the
// CSRF token is the form's hidden field. The SSE stream shows the outcome.
function enhanceDecideForm(form, onDecided) {
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const data = new FormData(form);
    const button = event.submitter;
    if (button && button.name) data.set(button.name, button.value);
    for (const b of form.querySelectorAll("button")) b.disabled = true;
    let message = "";
    try {
      const response = await fetch(form.action, {
        method: "POST", body: new URLSearchParams(data), headers: { Accept: "application/json" },
        credentials: "same-origin",
      });
      const body = await response.json();
      message = response.ok ? `${body.decision === "approve" ? "approved" : "rejected"} by ${body.by}` : body.error;
      const node = form.closest("[data-node]");
      notify((node ? node.dataset.node + ": " : "") + message, response.ok);
      if (response.ok && onDecided) onDecided(form);
    } catch (err) {
      message = "could not reach the listener; try again";
      for (const b of form.querySelectorAll("button")) b.disabled = false;
    }
    let note = form.querySelector(".result");
    if (!note) {
      note = document.createElement("span");
      note.className = "result";
      form.appendChild(note);
    }
    note.textContent = message;
  });
}

function decideForm(approvalId, next) {
  const form = document.createElement("form");
  form.method = "post";
  form.action = "/approvals/" + encodeURIComponent(approvalId);
  form.className = "decide";
  form.dataset.approval = approvalId;
  const fields = [["csrf", document.querySelector('meta[name="csrf-token"]').content], ["next", next]];
  for (const [name, value] of fields) {
    const input = document.createElement("input");
    input.type = "hidden"; input.name = name; input.value = value;
    form.appendChild(input);
  }
  const note = document.createElement("input");
  note.type = "text"; note.name = "note"; note.placeholder = "note (optional)"; note.maxLength = 2000;
  form.appendChild(note);
  for (const [value, label] of [["approve", "Approve"], ["reject", "Reject"]]) {
    const b = document.createElement("button");
    b.type = "submit"; b.name = "decision"; b.value = value; b.className = value; b.textContent = label;
    form.appendChild(b);
  }
  return form;
}

// The parts of a run's page that the graph's events do not redraw (its facts
// and the node table: jobs, attempts, timings, approvals), re-read from the
// page after each burst of events, so nothing on the page lags the stream.
const RUN_PARTS = ["run-facts", "nodes"];

async function refreshParts(ids) {
  try {
    const response = await fetch(location.href, { headers: { Accept: "text/html" }, credentials: "same-origin" });
    if (!response.ok) return;
    const doc = new DOMParser().parseFromString(await response.text(), "text/html");
    for (const id of ids) {
      const fresh = doc.getElementById(id);
      const old = document.getElementById(id);
      if (fresh && old) { old.replaceWith(fresh); localTimes(fresh); }
    }
  } catch (err) {
    // The listener is restarting: the next event reads again.
  }
}

function followRun(url) {
  const live = document.getElementById("live");
  const gates = document.getElementById("run-approvals");
  const section = document.getElementById("approvals-section");
  const next = gates ? gates.dataset.next : "/approvals";
  let pending = null;
  const reread = () => {
    if (!pending) pending = setTimeout(() => { pending = null; refreshParts(RUN_PARTS); }, 200);
  };
  function syncGates() {
    if (section && gates) section.hidden = gates.querySelector(".gate") === null;
  }

  function nodeState(node, state) {
    for (const g of document.querySelectorAll(`#graph g.node[data-node="${CSS.escape(node)}"]`)) {
      setState(g, state);
      const label = g.querySelector(".node-state");
      if (label) label.textContent = state;
    }
    for (const cell of document.querySelectorAll(`#nodes tr[data-node="${CSS.escape(node)}"] .cell-state span`)) {
      setState(cell, state);
      cell.textContent = state;
    }
    if (state !== "awaiting_approval") dropGate(node);
  }
  function dropGate(node) {
    for (const el of gates ? gates.querySelectorAll(`.gate[data-node="${CSS.escape(node)}"]`) : []) el.remove();
    syncGates();
  }
  function addGate(node, approvalId) {
    if (!gates || gates.querySelector(`form[data-approval="${CSS.escape(approvalId)}"]`)) return;
    const div = document.createElement("div");
    div.className = "gate"; div.dataset.node = node;
    const strong = document.createElement("strong");
    strong.textContent = node;
    div.append(strong, " awaits approval ");
    const form = decideForm(approvalId, next);
    enhanceDecideForm(form);
    div.appendChild(form);
    gates.appendChild(div);
    syncGates();
  }
  function runState(status) {
    const el = document.getElementById("run-status");
    if (el) { setState(el, status); el.textContent = status; }
  }

  const source = new EventSource(url);
  source.addEventListener("open", () => { live.textContent = "live"; live.className = "live on"; });
  source.addEventListener("snapshot", (e) => {
    const snap = JSON.parse(e.data);
    runState(snap.run.status);
    for (const n of snap.nodes) nodeState(n.node, n.status);
    for (const a of snap.approvals) addGate(a.node, a.approval_id);
    syncGates();
    reread();
    if (snap.final) finish(snap.run.status);
  });
  source.addEventListener("node", (e) => { const d = JSON.parse(e.data); nodeState(d.node, d.status); reread(); });
  source.addEventListener("approval", (e) => {
    const d = JSON.parse(e.data);
    if (d.status === "pending") addGate(d.node, d.approval_id); else dropGate(d.node);
    reread();
  });
  source.addEventListener("run", (e) => {
    const d = JSON.parse(e.data);
    runState(d.status);
    reread();
    if (FINAL.has(d.status)) finish(d.status);
  });
  source.addEventListener("error", () => {
    if (source.readyState === EventSource.CLOSED) { live.textContent = "disconnected"; live.className = "live off"; }
    else { live.textContent = "reconnecting…"; live.className = "live off"; }
  });
  function finish(status) {
    // The stream ends after the final status; closing first keeps the browser
    // from reconnecting to a run that has nothing more to say.
    source.close();
    live.textContent = "finished: " + status; live.className = "live done";
  }
}

// Pages that follow a stream of their own (a loop) or refresh on a timer
// (lists) swap in a freshly rendered <main>, never reloading the document.
async function refreshMain(force) {
  if (!force && document.activeElement && document.activeElement.closest("main form")) return;
  try {
    const response = await fetch(location.href, { headers: { Accept: "text/html" }, credentials: "same-origin" });
    if (!response.ok) return;
    const doc = new DOMParser().parseFromString(await response.text(), "text/html");
    const fresh = doc.getElementById("main");
    if (fresh) { document.getElementById("main").replaceWith(fresh); enhance(fresh); }
  } catch (err) {
    // The listener is restarting: the next tick tries again.
  }
}

function followLoop(url) {
  let pending = null;
  const source = new EventSource(url);
  const kick = () => { if (!pending) pending = setTimeout(() => { pending = null; refreshMain(); }, 300); };
  for (const name of ["run", "node", "approval", "loop"]) source.addEventListener(name, kick);
}

// An action posted with fetch, as a decision is: the answer goes to the
// notice, and the page is re-rendered in place to show what it changed.
function enhanceActForm(form) {
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    for (const b of form.querySelectorAll("button")) b.disabled = true;
    // Busy until the page is re-rendered: what is typed meanwhile would be replaced.
    document.body.setAttribute("aria-busy", "true");
    try {
      const response = await fetch(form.action, {
        method: "POST", body: new URLSearchParams(new FormData(form)),
        headers: { Accept: "application/json" }, credentials: "same-origin",
      });
      const body = await response.json();
      notify(response.ok ? body.message : body.error, response.ok);
    } catch (err) {
      notify("could not reach the listener; try again", false);
    }
    if (document.activeElement) document.activeElement.blur();
    await refreshMain(true);
    for (const b of form.querySelectorAll("button")) b.disabled = false;
    document.body.removeAttribute("aria-busy");
  });
}

function enhance(root) {
  localTimes(root);
  for (const form of root.querySelectorAll("form.act")) enhanceActForm(form);
  for (const form of root.querySelectorAll("form.decide")) {
    enhanceDecideForm(form, (f) => {
      const row = f.closest("tr[data-approval]");
      if (row) row.classList.add("decided");
    });
  }
  for (const select of root.querySelectorAll("select[data-autosubmit]")) {
    select.addEventListener("change", () => select.form.submit());
  }
}

document.addEventListener("DOMContentLoaded", () => {
  enhance(document);
  const body = document.body;
  if (body.dataset.runGraph) followRun(body.dataset.runGraph);
  if (body.dataset.follow) followLoop(body.dataset.follow);
  if (body.dataset.refresh) setInterval(refreshMain, Number(body.dataset.refresh) * 1000);
});
