// pylayer approver page. Vanilla JavaScript, no build step. Every piece of data from the
// broker is put into the page as text (createTextNode / textContent), never as HTML.
"use strict";

(function () {
  const POLL_MS = 2000;      // how often the change counter is read
  const FULL_MS = 30000;     // a full refresh even without a change (other processes)
  const RECENT = 50;         // finished requests shown
  const RUNS = 10;           // a session's recent exec and shell runs shown
  const AUDIT_SHOWN = 200;   // newest audit events shown
  const PAGE = 1000;         // rows a list call asks for (the broker's most)
  // Lists are fetched whole once, then only what changed since the newest time seen,
  // less this margin: a replica whose clock is a little behind still gets its changes in.
  const SKEW_MS = 5000;

  let me = null;             // {subject, role, csrf}
  let view = "requests";
  let version = -1;
  let lastFull = 0;
  let sessions = [];
  let envs = {};             // session id -> env
  let runs = {};             // session id -> its recent runs; null: the broker runs no sessions
  let timer = null;
  let requestsById = {};     // request id -> request, to name a binding's packages
  let reqSince = null;       // the newest request update seen (ISO time), null: none yet
  let auditKey = null;       // the session the audit events were fetched for
  let auditSince = null;     // the newest audit event time seen
  let auditById = new Map(); // event id -> event, the newest AUDIT_SHOWN
  const asked = new Set();   // request ids fetched one by one for a binding

  const $ = (id) => document.getElementById(id);

  // el builds an element; attrs are set as properties or attributes, children are nodes
  // or strings (always text). An on<event> attr is kept on the element (_on) and reached
  // through one shared listener, so morph can hand an element that stays in the page the
  // handler of its newest rendering: a handler always sees fresh data.
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      else if (k.startsWith("on")) {
        (e._on || (e._on = {}))[k.slice(2)] = v;
        e.addEventListener(k.slice(2), dispatch);
      } else e.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat(Infinity)) {
      if (c === undefined || c === null || c === false) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function dispatch(ev) {
    const h = this._on && this._on[ev.type];
    if (h) return h.call(this, ev);
  }

  // ---- morph: patch the page instead of rebuilding it ----
  //
  // A refresh builds the new nodes with el() and morph patches them into the page: children
  // are matched by key (id, data-request, data-session, data-key; else tag, class and
  // position among their like), a match is updated in place (attributes, text, handlers,
  // its children in turn) and kept, everything else is inserted or removed. The element
  // that holds the focus is never moved or replaced: its siblings move around it. So focus,
  // caret and selection, what is typed, chosen files, scroll positions and <details open>
  // (the user's, never the render's) all stay.

  function keyOf(n, seen) {
    let kind;
    if (n.nodeType === Node.ELEMENT_NODE) {
      const k = n.id || n.dataset.request || n.dataset.session || n.dataset.key;
      if (k) return "=" + k;
      kind = n.nodeName + "." + n.className;
    } else kind = "#" + n.nodeType;
    const i = seen.get(kind) || 0;
    seen.set(kind, i + 1);
    return kind + "/" + i;
  }

  function sameKind(a, b) {
    return a.nodeType === b.nodeType && a.nodeName === b.nodeName &&
      (a.nodeName !== "INPUT" || a.type === b.type);
  }

  function morph(parent, next) {
    const old = new Map();
    let seen = new Map();
    for (const o of parent.childNodes) old.set(keyOf(o, seen), o);
    seen = new Map();
    const focus = document.activeElement;
    let cursor = parent.firstChild; // everything before it is in place
    for (const n of next) {
      const k = keyOf(n, seen);
      let m = old.get(k);
      if (m && sameKind(m, n)) {
        old.delete(k);
        patch(m, n);
      } else m = n;
      if (m === cursor) { cursor = cursor.nextSibling; continue; }
      if (m.isConnected && focus && m.contains(focus)) {
        // m is further down: move what lies between to the end instead of moving m.
        // Those nodes are placed later or removed below.
        while (cursor !== m) { const c = cursor; cursor = cursor.nextSibling; parent.append(c); }
        cursor = m.nextSibling;
        continue;
      }
      parent.insertBefore(m, cursor);
    }
    while (cursor) { const c = cursor; cursor = cursor.nextSibling; c.remove(); }
  }

  function patch(o, n) {
    if (o.nodeType !== Node.ELEMENT_NODE) {
      if (o.nodeValue !== n.nodeValue) o.nodeValue = n.nodeValue;
      return;
    }
    const userOwned = (name) => name === "open" && o.nodeName === "DETAILS";
    for (const a of n.attributes) {
      if (!userOwned(a.name) && o.getAttribute(a.name) !== a.value) o.setAttribute(a.name, a.value);
    }
    for (const a of [...o.attributes]) {
      if (!userOwned(a.name) && !n.hasAttribute(a.name)) o.removeAttribute(a.name);
    }
    for (const type of Object.keys(n._on || {})) o.addEventListener(type, dispatch); // once per type
    o._on = n._on;
    morph(o, [...n.childNodes]);
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

  // ---- short values ----
  //
  // Digests show as their first 12 hex characters, and every other run of 32 or more hex
  // characters (a digest in a reference, a session or request id in a table) is cut to 12
  // the same way. The full value is the element's title (on hover) and its data-full.
  //
  // Copying: selecting a short value copies the full one (the copy handler below), rather
  // than a copy button beside each value. A button per digest would add a Tab stop to every
  // table row and a 44px target to every cell, widening the very tables the short values
  // narrow; the Clipboard API a button needs is also missing on a broker served over plain
  // http (not a secure context), while the copy event works everywhere. Keyboard users copy
  // the same way: Ctrl+A, Ctrl+C copies the page with every value in full.

  const LONG_HEX = /[0-9a-f]{32,}/g;
  const TOKEN = /([\w.:/@+-]*[0-9a-f]{32}[\w.:/@+-]*)/; // a word holding a long hex run

  function cut(s) { return s.replace(LONG_HEX, (h) => h.slice(0, 12)); }

  // digest shows a sha256: digest as 12 hex characters.
  function digest(d) {
    if (!d) return "none";
    return el("code", { class: "digest", title: d, "data-full": d }, short(d));
  }

  // shortened is text with each word that holds a long hex run cut to a short value.
  function shortened(text, cls) {
    const parts = String(text || "").split(TOKEN);
    if (parts.length === 1) return parts[0];
    return parts.map((p, i) => i % 2 === 0 ? p
      : el("code", { class: cls || "ref", title: p, "data-full": p }, cut(p)));
  }

  // onCopy puts the full values on the clipboard when the selection holds short ones.
  function onCopy(ev) {
    if (ev.target instanceof HTMLInputElement) return; // text typed in a field: as typed
    const sel = document.getSelection();
    if (!sel || sel.isCollapsed || !sel.rangeCount || !ev.clipboardData) return;
    const within = sel.getRangeAt(0).commonAncestorContainer;
    const one = (within.nodeType === Node.ELEMENT_NODE ? within : within.parentElement).closest("[data-full]");
    let text;
    if (one) text = one.dataset.full; // inside one value: all of it, however little is selected
    else {
      const whole = [...document.querySelectorAll("[data-full]")].filter((e) => e.getClientRects().length && sel.containsNode(e, false));
      if (!whole.length) return;
      text = sel.toString();
      let at = 0;
      for (const e of whole) { // in document order, as in the selection's text
        const i = text.indexOf(e.textContent, at);
        if (i < 0) continue;
        text = text.slice(0, i) + e.dataset.full + text.slice(i + e.textContent.length);
        at = i + e.dataset.full.length;
      }
    }
    ev.clipboardData.setData("text/plain", text);
    ev.preventDefault();
  }

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
    requestsById = {}; reqSince = null; auditKey = null; auditById = new Map(); asked.clear();
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

  // render patches container's children into nodes (see morph).
  function render(container, nodes) { morph(container, nodes); }

  // table builds a table in a focusable scroll region; rows are {key, cells}, the key
  // identifying the row across refreshes. Each cell names its column in data-label, which
  // the phone layout (app.css) shows beside the value when it stacks a row's cells.
  function table(label, head, rows) {
    return el("div", { class: "table-wrap", role: "region", "aria-label": label, tabindex: "0" },
      el("table", {},
        el("thead", {}, el("tr", {}, head.map((h) => el("th", { scope: "col" }, h)))),
        el("tbody", {}, rows.map((r) => el("tr", { "data-key": r.key },
          r.cells.map((c, i) => el("td", { "data-label": head[i] }, c)))))));
  }

  function row(key, ...cells) { return { key: String(key), cells }; }

  // ---- requests ----

  const steps = ["classifying", "approved", "building", "built", "bound"];

  function progress(r) {
    if (r.state === "failed") return el("p", { class: "failed" }, "Build failed: ", r.error || "no reason recorded");
    if (r.state === "classifying" && r.error) return el("p", { class: "meta" }, "Not classified yet: ", r.error);
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
        " session ", shortened(r.session_id, "id"),
        " · ", when(r.created),
        r.approver ? " · decided by " + r.approver : ""),
      r.packages && r.packages.length ? table("Packages of request " + r.id, ["Package", "Version", "Size", "Wheel"],
        r.packages.map((p) => row(p.name, p.name, p.version, size(p.size), p.filename || ""))) : null,
      r.reasons && r.reasons.length ? el("ul", { class: "reasons", "aria-label": "Reasons" }, r.reasons.map((x) => el("li", {}, shortened(x)))) : null,
      r.digest ? el("p", { class: "meta" }, "Layer ", digest(r.digest)) : null,
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
    box.append(el("div", { class: "deny" },
      el("label", { for: reasonId }, "Reason for denying"),
      el("input", { id: reasonId, type: "text", maxlength: "2000", autocomplete: "off" }),
      el("button", {
        type: "button", class: "danger", onclick: () => {
          const reason = document.getElementById(reasonId); // the one in the page, not this render's
          if (!reason.value.trim()) { showError(new Error("Write a reason before denying: the agent sees it")); reason.focus(); return; }
          act("deny", { reason: reason.value });
        },
      }, "Deny")));
    return box;
  }

  // pages reads every page of a list from path (which has a query), following next_cursor.
  async function pages(path, key) {
    let out = [];
    let cursor = "";
    for (;;) {
      const data = await api("GET", path + "&limit=" + PAGE + (cursor ? "&cursor=" + encodeURIComponent(cursor) : ""));
      out = out.concat(data[key] || []);
      cursor = data.next_cursor || "";
      if (!cursor) return out;
    }
  }

  // since is the query time of the newest t seen, less the skew margin.
  function since(t) { return encodeURIComponent(new Date(Date.parse(t) - SKEW_MS).toISOString()); }

  function newest(a, b) { return !a || (b && Date.parse(b) > Date.parse(a)) ? b : a; }

  async function loadRequests() {
    // The first time: every pending request and the newest finished ones; then only the
    // requests changed since the newest update seen.
    let got;
    if (reqSince === null) {
      const [pending, latest] = await Promise.all([pages("/v1/requests?state=pending", "requests"),
        api("GET", "/v1/requests?order=desc&limit=" + (RECENT * 2))]);
      got = pending.concat(latest.requests || []);
    } else {
      got = await pages("/v1/requests?updated_since=" + since(reqSince), "requests");
    }
    for (const r of got) {
      requestsById[r.id] = r; // names the packages of each binding
      reqSince = newest(reqSince, r.updated);
    }
    if (reqSince === null) reqSince = new Date(0).toISOString();
    const all = Object.values(requestsById).sort((a, b) => (Date.parse(a.created) - Date.parse(b.created)) || (a.id < b.id ? -1 : 1));
    const pending = all.filter((r) => r.state === "pending");
    const rest = all.filter((r) => r.state !== "pending").reverse().slice(0, RECENT);
    $("pending-count").textContent = pending.length ? "(" + pending.length + ")" : "";
    render($("pending"), pending.length ? pending.map(requestCard) : [el("p", { class: "empty" }, "Nothing waits for a decision.")]);
    render($("recent"), rest.length ? rest.map(requestCard) : [el("p", { class: "empty" }, "No requests yet.")]);
  }

  // loadBindingRequests fetches, once each, the requests of bindings older than what
  // loadRequests read, so that every binding names its packages.
  async function loadBindingRequests() {
    const ids = [];
    for (const s of sessions) {
      for (const b of ((envs[s.id] || {}).bindings || [])) {
        if (b.request_id && !requestsById[b.request_id] && !asked.has(b.request_id)) ids.push(b.request_id);
      }
    }
    if (!ids.length) return false;
    ids.forEach((id) => asked.add(id));
    const got = await Promise.all(ids.map((id) => api("GET", "/v1/requests/" + encodeURIComponent(id)).catch(() => null)));
    for (const r of got) if (r) requestsById[r.id] = r;
    return true;
  }

  // ---- sessions ----

  async function loadSessions() {
    sessions = await pages("/v1/sessions?", "sessions");
    const got = await Promise.all(sessions.map((s) => api("GET", "/v1/sessions/" + encodeURIComponent(s.id) + "/env").catch(() => null)));
    // A broker that runs no sessions answers 501 here: the cards then show no runs at all.
    const ran = await Promise.all(sessions.map((s) => api("GET", "/v1/sessions/" + encodeURIComponent(s.id) + "/runs?limit=" + RUNS)
      .then((l) => l.runs || []).catch(() => null)));
    envs = {};
    runs = {};
    sessions.forEach((s, i) => { envs[s.id] = got[i]; runs[s.id] = ran[i]; });
    await loadBindingRequests();
    render($("sessions"), sessions.length ? sessions.map(sessionCard) : [el("p", { class: "empty" }, "No sessions.")]);
    // Patched like the rest: the chosen option stays chosen (and an open list open); when
    // its session goes, the browser falls back to the first, All sessions.
    render($("audit-session"), [el("option", { value: "" }, "All sessions"),
      ...sessions.map((s) => el("option", { value: s.id, "data-key": s.id }, s.id + " (" + s.owner + ")"))]);
    renderBound();
  }

  function sessionCard(s) {
    const env = envs[s.id] || {};
    const binds = env.bindings || [];
    const base = env.base_packages || [];
    const fileId = "upload-" + s.id;
    const upload = async () => {
      showError(null);
      const file = document.getElementById(fileId); // the one in the page, with the chosen file
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
        el("dt", {}, "Interpreter"), el("dd", {}, digest(s.interpreter)),
        el("dt", {}, "Base"), el("dd", { "data-field": "base" }, digest(s.base))),
      binds.length ? table("Bindings of " + s.id, ["Kind", "Layer", "Digest", "Packages"],
        binds.map((b) => row(b.digest, b.kind, shortened(b.ref), digest(b.digest), bindingPackages(b))))
        : el("p", { class: "empty" }, "No ext or iso layers bound."),
      runsTable(s.id),
      base.length ? el("details", {}, el("summary", {}, "Base packages (" + base.length + ")"),
        el("ul", { class: "pkgs" }, base.map((p) => el("li", {}, p.name + " " + p.version)))) : null,
      el("div", { class: "actions" },
        el("button", { type: "button", onclick: rebase }, "Rebase onto current base"),
        el("button", { type: "button", class: "secondary", onclick: showAudit }, "Audit log")),
      el("div", { class: "upload" },
        el("label", { for: fileId }, "Upload a wheel for this session"),
        el("input", { id: fileId, type: "file", accept: ".whl" }),
        el("button", { type: "button", onclick: upload }, "Upload wheel")));
  }

  // runsTable lists a session's recent exec and shell runs on the broker's host, newest
  // first; nothing when the broker runs no sessions.
  function runsTable(id) {
    const l = runs[id];
    if (!l) return null;
    if (!l.length) return el("p", { class: "empty", "data-key": "runs" }, "No exec or shell runs on this host yet.");
    return table("Recent runs of " + id, ["Run", "Kind", "Status", "Started", "Took", "Code"],
      l.map((r) => row(r.run_id, shortened(r.run_id, "id"), r.kind,
        el("span", { class: "badge badge-run-" + r.status }, r.status), when(r.started), millis(r.duration_ms),
        el("code", { class: "summary" }, r.summary))));
  }

  function millis(ms) {
    if (ms === undefined || ms === null) return "";
    return ms < 1000 ? ms + " ms" : (ms / 1000).toFixed(1) + " s";
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
      render($("layers"), l.length ? [table("Layers in the registry and host cache", ["Kind", "Reference", "Digest", "Size", "Held by"],
        l.map((x) => row(x.kind + " " + x.ref + " " + x.digest, x.kind, shortened(x.ref), digest(x.digest), size(x.size), sessionList(holders(x.digest)))))]
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

  // sessionList names sessions by their short ids, comma separated.
  function sessionList(ids) { return ids.map((id, i) => [i ? ", " : "", shortened(id, "id")]); }

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
    const rows = [...m.values()].map((x) => row(x.digest, x.kind, shortened(x.ref), digest(x.digest), sessionList(x.by)));
    render($("bound"), rows.length ? [table("Layers bound by sessions", ["Kind", "Reference", "Digest", "Held by"], rows)]
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
    // The newest events the first time (or for another session); then only those since
    // the newest seen.
    const sid = $("audit-session").value;
    const filter = sid ? "session=" + encodeURIComponent(sid) + "&" : "";
    let got;
    if (auditKey !== sid) {
      const data = await api("GET", "/v1/audit?" + filter + "order=desc&limit=" + AUDIT_SHOWN);
      auditById = new Map();
      auditSince = null;
      auditKey = sid;
      got = data.events || [];
    } else {
      got = auditSince ? await pages("/v1/audit?" + filter + "since=" + since(auditSince), "events") : [];
    }
    for (const e of got) {
      auditById.set(e.id, e);
      auditSince = newest(auditSince, e.time);
    }
    if (auditSince === null) auditSince = new Date(0).toISOString();
    const ev = [...auditById.values()].sort((a, b) => b.id - a.id).slice(0, AUDIT_SHOWN);
    auditById = new Map(ev.map((e) => [e.id, e]));
    render($("audit"), ev.length ? [table("Audit events", ["Time", "Actor", "Action", "Session", "Packages", "Decision", "Detail"],
      ev.map((e) => row(e.id, when(e.time), shortened(e.actor, "id"), e.action, shortened(e.session_id, "id"),
        (e.packages || []).map((p) => p.name + " " + p.version).join(", "), e.decision || "", shortened(e.detail))))]
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
    document.addEventListener("copy", onCopy);
    document.querySelectorAll("[data-view]").forEach((b) => b.addEventListener("click", () => show(b.dataset.view)));
    try {
      signedIn(await api("GET", "/ui/me"));
    } catch (e) {
      signedOut();
    }
  }

  document.addEventListener("DOMContentLoaded", start);
})();
