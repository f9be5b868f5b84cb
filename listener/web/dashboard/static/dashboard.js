// The dashboard's one script: live node states over the observer's SSE stream,
// approvals decided without leaving the page, and list pages kept fresh.
// No framework and no build step; the pages work without it (forms post,
// links navigate), this only makes them live.
"use strict";

const FINAL = new Set(["succeeded", "failed", "cancelled", "skipped"]);
const STATE_CLASS = /\bstate-[a-z_]+\b/g;

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

function followRun(url) {
  const live = document.getElementById("live");
  const gates = document.getElementById("run-approvals");
  const next = gates ? gates.dataset.next : "/approvals";

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
    if (snap.final) finish(snap.run.status);
  });
  source.addEventListener("node", (e) => { const d = JSON.parse(e.data); nodeState(d.node, d.status); });
  source.addEventListener("approval", (e) => {
    const d = JSON.parse(e.data);
    if (d.status === "pending") addGate(d.node, d.approval_id); else dropGate(d.node);
  });
  source.addEventListener("run", (e) => {
    const d = JSON.parse(e.data);
    runState(d.status);
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
async function refreshMain() {
  if (document.activeElement && document.activeElement.closest("main form")) return;
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

function enhance(root) {
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
