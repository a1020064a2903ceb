// Pulse web UI: keeps the regions marked data-live current without a reload.
// Regions are re-rendered by the server: on an event the page is fetched again and each live
// region whose content changed is swapped in, unless the user is typing in it.
(function () {
  "use strict";
  var regions = function () { return document.querySelectorAll("[data-live]"); };
  var timer = null;
  var inFlight = false;

  function announce(text) {
    var status = document.getElementById("live-status");
    if (status) { status.textContent = text; }
  }

  function refresh() {
    if (inFlight) { schedule(); return; }
    inFlight = true;
    fetch(window.location.href, { credentials: "same-origin", headers: { "X-Pulse-Live": "1" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html) { return; }
        var fresh = new DOMParser().parseFromString(html, "text/html");
        var changed = false;
        regions().forEach(function (el) {
          var active = document.activeElement;
          if (active && el.contains(active) && active.matches("input, textarea, select")) { return; }
          var next = fresh.getElementById(el.id);
          if (next && next.innerHTML !== el.innerHTML) { el.innerHTML = next.innerHTML; changed = true; }
        });
        if (changed) { announce("Updated " + new Date().toLocaleTimeString()); }
      })
      .catch(function () {})
      .then(function () { inFlight = false; });
  }

  function schedule() {
    if (timer) { return; }
    timer = setTimeout(function () { timer = null; refresh(); }, 250);
  }

  // One line of the live run feed: the tool called, the resource or finding it looked at and
  // the verdict it gave; the run's accounting; how it ended.
  function describe(kind, body) {
    var parts = [kind.replace("run.", "")];
    if (kind === "run.started") {
      parts.push(body.type || "");
      var scope = body.effective_scope_resource_ids || [];
      parts.push(scope.length ? scope.join(", ") : "all resources");
    } else if (kind === "run.tool") {
      parts.push(body.tool_name || "tool");
      try {
        var input = JSON.parse(body.input || "{}");
        ["resource_id", "finding_id", "verdict", "key", "severity"].forEach(function (field) {
          if (input[field]) { parts.push(field.replace("_", " ") + " " + input[field]); }
        });
      } catch (e) { /* input is not JSON: the tool name alone */ }
      if (body.success === false) { parts.push("failed"); }
    } else if (kind === "run.progress") {
      parts.push(body.provider_calls + " model calls", body.input_tokens + " in / " + body.output_tokens + " out tokens");
    } else if (kind === "run.completed") {
      parts.push(body.status, body.new_findings + " new findings", body.tool_call_count + " tool calls");
    }
    return parts.filter(Boolean).join(" · ");
  }

  function feed(kind, data) {
    var list = document.getElementById("run-feed");
    if (!list) { return; }
    var line = kind;
    try { line = describe(kind, JSON.parse(data)); } catch (e) { /* keep the kind alone */ }
    var item = document.createElement("li");
    item.textContent = new Date().toLocaleTimeString() + "  " + line;
    list.insertBefore(item, list.firstChild);
    while (list.children.length > 50) { list.removeChild(list.lastChild); }
  }

  function listen(url, kinds, onEvent) {
    if (!window.EventSource) { return; }
    var source = new EventSource(url, { withCredentials: true });
    kinds.forEach(function (kind) {
      source.addEventListener(kind, function (e) { onEvent(kind, e.data); });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    if (regions().length) {
      listen("/api/agent/events",
        ["finding.created", "finding.updated", "finding.resolved", "approval.pending", "action.completed"],
        function () { schedule(); });
      listen("/api/ai/patrol/stream",
        ["run.accepted", "run.started", "run.progress", "run.tool", "run.completed"],
        function (kind, data) { feed(kind, data); schedule(); });
      // Outcomes no event announces (a verification) are polled while something is in flight.
      setInterval(function () {
        if (document.querySelector("[data-pending]")) { schedule(); }
      }, 2000);
    }
    // Ask before a form marked data-confirm is sent.
    document.querySelectorAll("form[data-confirm]").forEach(function (form) {
      form.addEventListener("submit", function (e) {
        if (!window.confirm(form.getAttribute("data-confirm"))) { e.preventDefault(); }
      });
    });
  });
})();
