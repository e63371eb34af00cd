// pylayer approver page. Vanilla JavaScript, no build step. Every piece of data from the
// broker is put into the page as text (createTextNode / textContent), never as HTML.
"use strict";

(function () {
  const POLL_MS = 2000;      // how often the change counter is read
  const FULL_MS = 30000;     // a full refresh even without a change (other processes)
  const RECENT = 50;         // finished requests shown

  let me = null;             // {subject, role, csrf}
  let view = "requests";
  let version = -1;
  let lastFull = 0;
  let sessions = [];
  let envs = {};             // session id -> env
  let timer = null;
  let requestsById = {};     // request id -> request, to name a binding's packages

  const $ = (id) => document.getElementById(id);

  // el builds an element; attrs are set as properties or attributes, children are nodes
  // or strings (always text).
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat()) {
      if (c === undefined || c === null || c === false) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function size(n) {
    if (!n) return "";
    const u = ["B", "KiB", "MiB", "GiB"];
    let i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : String(n)) + " " + u[i];
  }

  function when(t) {
    if (!t) return "";
    const d = new Date(t);
    return isNaN(d) ? String(t) : d.toLocaleString();
  }

  function short(d) { return d ? String(d).replace(/^sha256:/, "").slice(0, 12) : ""; }

  class APIError extends Error {
    constructor(status, body) {
      super((body && body.error) || ("HTTP " + status));
      this.status = status;
      this.hint = body && body.hint;
    }
  }

  async function api(method, path, body) {
    const opts = { method, credentials: "same-origin", headers: {} };
    if (method !== "GET" && me) opts.headers["X-CSRF-Token"] = me.csrf;
    if (body instanceof FormData) opts.body = body;
    else if (body !== undefined) {
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(body);
    }
    const resp = await fetch(path, opts);
    let data = null;
    try { data = await resp.json(); } catch (e) { data = null; }
    if (resp.status === 401 && path !== "/ui/login") { signedOut(); }
    if (!resp.ok) throw new APIError(resp.status, data);
    return data;
  }

  function showError(e) {
    const msg = e ? (e.message + (e.hint ? " (" + e.hint + ")" : "")) : "";
    $("error").textContent = msg;
  }

  function status(msg) { $("status").textContent = msg; }

  // ---- sign-in ----

  function signedOut() {
    me = null;
    if (timer) { clearInterval(timer); timer = null; }
    $("app").hidden = true;
    $("logout").hidden = true;
    $("who").textContent = "";
    $("login").hidden = false;
  }

  function signedIn(m) {
    me = m;
    $("login").hidden = true;
    $("app").hidden = false;
    $("logout").hidden = false;
    $("who").textContent = "Signed in as " + m.subject + " (" + m.role + ")";
    $("gc").hidden = m.role !== "admin";
    version = -1;
    refresh(true);
    if (!timer) timer = setInterval(poll, POLL_MS);
  }

  async function login(ev) {
    ev.preventDefault();
    const input = $("token");
    $("login-error").textContent = "";
    try {
      const m = await api("POST", "/ui/login", { token: input.value });
      input.value = "";
      signedIn(m);
      document.querySelector('[data-view="requests"]').focus();
    } catch (e) {
      $("login-error").textContent = "Sign-in failed: " + e.message;
    }
  }

  async function logout() {
    try { await api("POST", "/ui/logout"); } catch (e) { /* signed out either way */ }
    signedOut();
    $("token").focus();
  }

  // ---- updates ----

  async function poll() {
    if (!me) return;
    try {
      const v = await api("GET", "/ui/version");
      if (v.version !== version || Date.now() - lastFull > FULL_MS) {
        version = v.version;
        await refresh(false);
      }
    } catch (e) {
      if (me) $("updated").textContent = "Cannot reach the broker: " + e.message;
    }
  }

  async function refresh(all) {
    lastFull = Date.now();
    try {
      await loadRequests();
      await loadSessions();
      if (view === "layers" || all) await loadLayers();
      if (view === "audit" || all) await loadAudit();
      $("updated").textContent = "Updated " + new Date().toLocaleTimeString();
    } catch (e) {
      showError(e);
    }
  }

  // render replaces the children of container while keeping what the user typed in
  // inputs with an id, and the focus.
  function render(container, nodes) {
    const kept = {};
    container.querySelectorAll("input[id]:not([type=file]), select[id]").forEach((i) => { kept[i.id] = i.value; });
    const focused = document.activeElement && container.contains(document.activeElement) ? document.activeElement.id : "";
    // A chosen file cannot be set again by script: move the chosen input itself over.
    const files = [...container.querySelectorAll("input[type=file][id]")].filter((i) => i.files.length);
    container.replaceChildren(...nodes);
    for (const old of files) {
      const now = document.getElementById(old.id);
      if (now && container.contains(now)) now.replaceWith(old);
    }
    for (const [id, v] of Object.entries(kept)) {
      const i = document.getElementById(id);
      if (i && container.contains(i)) i.value = v;
    }
    if (focused) {
      const f = document.getElementById(focused);
      if (f) f.focus();
    }
  }

  function table(label, head, rows) {
    return el("div", { class: "table-wrap", role: "region", "aria-label": label, tabindex: "0" },
      el("table", {},
        el("thead", {}, el("tr", {}, head.map((h) => el("th", { scope: "col" }, h)))),
        el("tbody", {}, rows.map((r) => el("tr", {}, r.map((c) => el("td", {}, c)))))));
  }

  // ---- requests ----

  const steps = ["approved", "building", "built", "bound"];

  function progress(r) {
    if (r.state === "failed") return el("p", { class: "failed" }, "Build failed: ", r.error || "no reason recorded");
    const i = steps.indexOf(r.state);
    if (i < 0) return null;
    return el("ol", { class: "steps", "aria-label": "Build progress" },
      steps.map((s, j) => el("li", { class: j < i ? "done" : j === i ? "now" : "", "aria-current": j === i ? "step" : false }, s)));
  }

  function requestCard(r) {
    const title = r.upload ? "Uploaded wheel " + r.upload : (r.specs || []).join(", ");
    const card = el("article", { class: "card state-" + r.state, "data-request": r.id, "aria-label": "Request " + title },
      el("h3", {}, title),
      el("p", { class: "meta" },
        el("span", { class: "badge badge-" + r.state }, r.state),
        " session ", el("code", {}, r.session_id),
        " · ", when(r.created),
        r.approver ? " · decided by " + r.approver : ""),
      r.packages && r.packages.length ? table("Packages of request " + r.id, ["Package", "Version", "Size", "Wheel"],
        r.packages.map((p) => [p.name, p.version, size(p.size), p.filename || ""])) : null,
      r.reasons && r.reasons.length ? el("ul", { class: "reasons", "aria-label": "Reasons" }, r.reasons.map((x) => el("li", {}, x))) : null,
      r.digest ? el("p", { class: "meta" }, "Layer ", el("code", {}, r.digest)) : null,
      progress(r));
    if (r.state === "pending") card.append(decision(r));
    return card;
  }

  function decision(r) {
    const reasonId = "deny-reason-" + r.id;
    const act = async (what, body) => {
      showError(null);
      try {
        await api("POST", "/v1/requests/" + encodeURIComponent(r.id) + "/" + what, body);
        status("Request " + (what === "deny" ? "denied" : "approved"));
        await refresh(false);
      } catch (e) { showError(e); }
    };
    const box = el("div", { class: "decide" },
      el("div", { class: "actions" },
        el("button", { type: "button", class: "approve", onclick: () => act("approve", {}) }, "Approve"),
        r.isolated ? el("button", { type: "button", class: "approve", onclick: () => act("approve", { isolated: true }) }, "Approve as isolated layer") : null));
    const reason = el("input", { id: reasonId, type: "text", maxlength: "2000", autocomplete: "off" });
    box.append(el("div", { class: "deny" },
      el("label", { for: reasonId }, "Reason for denying"),
      reason,
      el("button", {
        type: "button", class: "danger", onclick: () => {
          if (!reason.value.trim()) { showError(new Error("Write a reason before denying: the agent sees it")); reason.focus(); return; }
          act("deny", { reason: reason.value });
        },
      }, "Deny")));
    return box;
  }

  async function loadRequests() {
    const data = await api("GET", "/v1/requests");
    const all = data.requests || [];
    requestsById = {};
    for (const r of all) requestsById[r.id] = r; // names the packages of each binding
    const pending = all.filter((r) => r.state === "pending");
    const rest = all.filter((r) => r.state !== "pending").reverse().slice(0, RECENT);
    $("pending-count").textContent = pending.length ? "(" + pending.length + ")" : "";
    render($("pending"), pending.length ? pending.map(requestCard) : [el("p", { class: "empty" }, "Nothing waits for a decision.")]);
    render($("recent"), rest.length ? rest.map(requestCard) : [el("p", { class: "empty" }, "No requests yet.")]);
  }

  // ---- sessions ----

  async function loadSessions() {
    const data = await api("GET", "/v1/sessions");
    sessions = data.sessions || [];
    const got = await Promise.all(sessions.map((s) => api("GET", "/v1/sessions/" + encodeURIComponent(s.id) + "/env").catch(() => null)));
    envs = {};
    sessions.forEach((s, i) => { envs[s.id] = got[i]; });
    render($("sessions"), sessions.length ? sessions.map(sessionCard) : [el("p", { class: "empty" }, "No sessions.")]);
    const sel = $("audit-session");
    const cur = sel.value;
    sel.replaceChildren(el("option", { value: "" }, "All sessions"), ...sessions.map((s) => el("option", { value: s.id }, s.id + " (" + s.owner + ")")));
    sel.value = sessions.some((s) => s.id === cur) ? cur : "";
    renderBound();
  }

  function sessionCard(s) {
    const env = envs[s.id] || {};
    const binds = env.bindings || [];
    const base = env.base_packages || [];
    const fileId = "upload-" + s.id;
    const file = el("input", { id: fileId, type: "file", accept: ".whl" });
    const upload = async () => {
      showError(null);
      const file = document.getElementById(fileId); // render may have moved the chosen one in
      if (!file.files.length) { showError(new Error("Choose a .whl file first")); file.focus(); return; }
      const fd = new FormData();
      fd.append("wheel", file.files[0], file.files[0].name);
      try {
        const r = await api("POST", "/v1/sessions/" + encodeURIComponent(s.id) + "/requests", fd);
        file.value = "";
        status("Uploaded " + (r.upload || "wheel") + ": " + r.state);
        await refresh(false);
      } catch (e) { showError(e); }
    };
    const rebase = async () => {
      showError(null);
      try {
        const ns = await api("POST", "/v1/sessions/" + encodeURIComponent(s.id) + "/rebase");
        status("Session rebased onto base " + short(ns.base));
        await refresh(false);
      } catch (e) { showError(e); }
    };
    const showAudit = () => { $("audit-session").value = s.id; show("audit"); };
    return el("article", { class: "card", "data-session": s.id, "aria-label": "Session " + s.id },
      el("h3", {}, el("code", {}, s.id)),
      el("dl", { class: "facts" },
        el("dt", {}, "Owner"), el("dd", {}, s.owner),
        el("dt", {}, "Created"), el("dd", {}, when(s.created)),
        el("dt", {}, "Interpreter"), el("dd", {}, el("code", { class: "digest" }, s.interpreter || "none")),
        el("dt", {}, "Base"), el("dd", { "data-field": "base" }, el("code", { class: "digest" }, s.base || "none"))),
      binds.length ? table("Bindings of " + s.id, ["Kind", "Layer", "Digest", "Packages"],
        binds.map((b) => [b.kind, b.ref, el("code", { class: "digest" }, b.digest), bindingPackages(b)]))
        : el("p", { class: "empty" }, "No ext or iso layers bound."),
      base.length ? el("details", {}, el("summary", {}, "Base packages (" + base.length + ")"),
        el("ul", { class: "pkgs" }, base.map((p) => el("li", {}, p.name + " " + p.version)))) : null,
      el("div", { class: "actions" },
        el("button", { type: "button", onclick: rebase }, "Rebase onto current base"),
        el("button", { type: "button", class: "secondary", onclick: showAudit }, "Audit log")),
      el("div", { class: "upload" },
        el("label", { for: fileId }, "Upload a wheel for this session"),
        file,
        el("button", { type: "button", onclick: upload }, "Upload wheel")));
  }

  function bindingPackages(b) {
    const r = requestsById[b.request_id];
    if (!r || !r.packages) return "";
    return r.packages.map((p) => p.name + " " + p.version).join(", ");
  }

  // ---- layers ----

  async function loadLayers() {
    try {
      const data = await api("GET", "/v1/layers");
      const l = data.layers || [];
      render($("layers"), l.length ? [table("Layers", ["Kind", "Reference", "Digest", "Size", "Held by"],
        l.map((x) => [x.kind, x.ref, el("code", { class: "digest" }, x.digest), size(x.size), holders(x.digest).join(", ")]))]
        : [el("p", { class: "empty" }, "No layers.")]);
    } catch (e) {
      const msg = e.status === 501 ? "Layer listing is not configured on this broker." : "Cannot list layers: " + e.message;
      render($("layers"), [el("p", { class: "empty" }, msg)]);
    }
    renderBound();
  }

  function holders(digest) {
    return sessions.filter((s) => s.base === digest || s.interpreter === digest ||
      ((envs[s.id] || {}).bindings || []).some((b) => b.digest === digest)).map((s) => s.id);
  }

  function renderBound() {
    const m = new Map();
    for (const s of sessions) {
      const add = (kind, ref, digest) => {
        if (!digest) return;
        if (!m.has(digest)) m.set(digest, { kind, ref, digest, by: [] });
        m.get(digest).by.push(s.id);
      };
      add("python", "", s.interpreter);
      add("base", "", s.base);
      for (const b of ((envs[s.id] || {}).bindings || [])) add(b.kind, b.ref, b.digest);
    }
    const rows = [...m.values()].map((x) => [x.kind, x.ref, el("code", { class: "digest" }, x.digest), x.by.join(", ")]);
    render($("bound"), rows.length ? [table("Layers bound by sessions", ["Kind", "Reference", "Digest", "Held by sessions"], rows)]
      : [el("p", { class: "empty" }, "No session holds a layer.")]);
  }

  async function gc() {
    showError(null);
    $("gc-result").textContent = "Collecting…";
    try {
      const r = await api("POST", "/v1/gc");
      $("gc-result").textContent = "Removed " + (r.removed || []).length + " layers, freed " + (size(r.freed_bytes) || "0 B") + ".";
      await loadLayers();
    } catch (e) {
      $("gc-result").textContent = e.status === 501 ? "gc is not configured on this broker." : "gc failed: " + e.message;
    }
  }

  // ---- audit ----

  async function loadAudit() {
    const sid = $("audit-session").value;
    const data = await api("GET", "/v1/audit" + (sid ? "?session=" + encodeURIComponent(sid) : ""));
    const ev = (data.events || []).slice().reverse();
    render($("audit"), ev.length ? [table("Audit events", ["Time", "Actor", "Action", "Session", "Packages", "Decision", "Detail"],
      ev.map((e) => [when(e.time), e.actor, e.action, e.session_id || "",
        (e.packages || []).map((p) => p.name + " " + p.version).join(", "), e.decision || "", e.detail || ""]))]
      : [el("p", { class: "empty" }, "No events.")]);
  }

  // ---- views ----

  function show(name) {
    view = name;
    document.querySelectorAll("[data-view]").forEach((b) => {
      if (b.dataset.view === name) b.setAttribute("aria-current", "page");
      else b.removeAttribute("aria-current");
    });
    document.querySelectorAll(".view").forEach((s) => { s.hidden = s.id !== "view-" + name; });
    if (name === "layers") loadLayers().catch(showError);
    if (name === "audit") loadAudit().catch(showError);
  }

  async function start() {
    $("login-form").addEventListener("submit", login);
    $("logout").addEventListener("click", logout);
    $("gc").addEventListener("click", gc);
    $("audit-session").addEventListener("change", () => loadAudit().catch(showError));
    document.querySelectorAll("[data-view]").forEach((b) => b.addEventListener("click", () => show(b.dataset.view)));
    try {
      signedIn(await api("GET", "/ui/me"));
    } catch (e) {
      signedOut();
    }
  }

  document.addEventListener("DOMContentLoaded", start);
})();
