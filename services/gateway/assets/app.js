// Pulse web UI: keeps the regions marked data-live current without a reload, and runs the
// Chat page (a turn's Server-Sent Events read from fetch(), rendered as they arrive).
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

  // ---- Chat: Pulse Assistant. Model text only ever reaches the page through textContent. ----

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) { node.className = className; }
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    return node;
  }

  function badge(word) {
    return el("span", "badge b-" + String(word).replace(/[^a-z0-9]/gi, "-"), String(word).replace(/_/g, " "));
  }

  // Raw tool input or output for a details view: JSON indented when it parses.
  function pretty(raw) {
    if (raw === undefined || raw === null || raw === "") { return ""; }
    if (typeof raw !== "string") { return JSON.stringify(raw, null, 2); }
    try { return JSON.stringify(JSON.parse(raw), null, 2); } catch (e) { return raw; }
  }

  function facts(pairs) {
    var list = el("dl", "facts");
    pairs.forEach(function (pair) {
      list.appendChild(el("dt", null, pair[0]));
      var dd = el("dd");
      if (pair[1] instanceof Node) { dd.appendChild(pair[1]); } else { dd.textContent = pair[1] || "—"; }
      list.appendChild(dd);
    });
    return list;
  }

  function code(text) { return el("code", null, text || "—"); }

  // Why the gateway refused a request: its JSON error, or the error page of a refused form.
  function refusal(response) {
    return response.text().then(function (body) {
      try {
        var json = JSON.parse(body);
        return { code: json.error, message: json.message };
      } catch (e) { /* an HTML error page */ }
      var page = new DOMParser().parseFromString(body, "text/html");
      var message = page.querySelector(".flash.error");
      var errorCode = page.querySelector(".facts dd code");
      return {
        code: errorCode ? errorCode.textContent : String(response.status),
        message: message ? message.textContent : "The gateway answered " + response.status + ".",
      };
    });
  }

  // Reads a Server-Sent Events body as it arrives; calls onEvent(name, data) per frame.
  function readEvents(response, onEvent) {
    var reader = response.body.getReader();
    var decoder = new TextDecoder();
    var buffer = "";
    function frame(block) {
      var name = "message";
      var data = [];
      block.split("\n").forEach(function (line) {
        if (!line || line.charAt(0) === ":") { return; }
        var colon = line.indexOf(":");
        var field = colon < 0 ? line : line.slice(0, colon);
        var value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "event") { name = value; } else if (field === "data") { data.push(value); }
      });
      if (!data.length) { return; }
      var payload;
      try { payload = JSON.parse(data.join("\n")); } catch (e) { payload = { text: data.join("\n") }; }
      onEvent(name, payload);
    }
    function split() {
      buffer = buffer.replace(/\r\n/g, "\n");
      var cut = buffer.indexOf("\n\n");
      while (cut >= 0) {
        frame(buffer.slice(0, cut));
        buffer = buffer.slice(cut + 2);
        cut = buffer.indexOf("\n\n");
      }
    }
    function pump() {
      return reader.read().then(function (chunk) {
        if (chunk.done) {
          buffer += decoder.decode();
          split();
          if (buffer.trim()) { frame(buffer); }
          return;
        }
        buffer += decoder.decode(chunk.value, { stream: true });
        split();
        return pump();
      });
    }
    return pump();
  }

  function chat(root) {
    var transcript = document.getElementById("transcript");
    var status = document.getElementById("chat-status");
    var form = document.getElementById("chat-form");
    var prompt = document.getElementById("chat-prompt");
    var level = document.getElementById("chat-control");
    var send = document.getElementById("chat-send");
    var stop = document.getElementById("chat-stop");
    var sessionField = form.querySelector("input[name=session_id]");
    var csrfToken = form.querySelector("input[name=csrf]").value;
    var labels = JSON.parse(root.getAttribute("data-tool-labels") || "{}");
    var canApprove = root.getAttribute("data-can-approve") === "true";
    var actor = root.getAttribute("data-actor");
    var approvers = root.getAttribute("data-approvers");
    var tools = {};
    var answer = null;
    var streaming = false;

    function say(text) { status.textContent = text; }

    function add(item) {
      transcript.appendChild(item);
      item.scrollIntoView({ block: "nearest" });
      return item;
    }

    function who(item, name) { item.appendChild(el("strong", "who", name)); }

    function userRow(text) {
      answer = null;
      var item = el("li", "msg msg-user");
      who(item, "You");
      item.appendChild(el("p", "text", text));
      add(item);
    }

    // Streamed answer text goes into the current answer; anything else in between starts a new one.
    function answerText(text) {
      if (!answer) {
        var item = el("li", "msg msg-assistant");
        who(item, "Pulse Assistant");
        answer = el("p", "text");
        item.appendChild(answer);
        add(item);
      }
      answer.appendChild(document.createTextNode(text));
    }

    // A tool row, keyed by its call id: pending, then done, failed, cancelled or denied.
    function toolRow(tool) {
      answer = null;
      var known = tools[tool.id] || {};
      var merged = {
        id: tool.id,
        name: tool.name || known.name || "",
        input: tool.input !== undefined && tool.input !== "" ? tool.input : known.input,
        output: tool.output !== undefined ? tool.output : known.output,
        reason: tool.reason || known.reason,
        state: tool.state,
        duration: tool.duration !== undefined ? tool.duration : known.duration,
        item: known.item,
      };
      var item = merged.item || add(el("li", "tool"));
      var open = item.querySelector("details") && item.querySelector("details").open;
      item.className = "tool tool-" + merged.state;
      item.setAttribute("data-tool-id", merged.id);
      item.textContent = "";
      var details = el("details");
      details.open = Boolean(open);
      var summary = el("summary");
      summary.appendChild(el("span", "tool-label", labels[merged.name] || "Used a tool"));
      summary.appendChild(document.createTextNode(" "));
      summary.appendChild(badge(merged.state));
      if (merged.duration !== undefined) { summary.appendChild(el("span", "hint", " " + merged.duration + " ms")); }
      details.appendChild(summary);
      var rows = [["Tool", code(merged.name)], ["Input", el("pre", null, pretty(merged.input) || "—")]];
      if (merged.output !== undefined && merged.output !== "") { rows.push(["Output", el("pre", null, pretty(merged.output))]); }
      if (merged.reason) { rows.push(["Why", merged.reason]); }
      details.appendChild(facts(rows));
      item.appendChild(details);
      merged.item = item;
      tools[merged.id] = merged;
    }

    // Where an approval card is decided: the Approvals page's form for those who may approve.
    function decision(box, card) {
      box.textContent = "";
      var id = card.action_id;
      fetch("/api/actions/" + encodeURIComponent(id), { credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (action) {
          var state = action ? action.state : card.state;
          if (state !== "pending_approval") {
            var decided = el("p", null, "Now ");
            decided.appendChild(badge(state || "unknown"));
            box.appendChild(decided);
          } else if (canApprove) {
            var form = el("form", "decision");
            form.method = "post";
            form.action = "/actions/" + encodeURIComponent(id) + "/decision";
            var token = el("input");
            token.type = "hidden"; token.name = "csrf"; token.value = csrfToken;
            form.appendChild(token);
            var label = el("label", null, "Reason (recorded in the audit log)");
            label.htmlFor = "reason-" + id;
            var reason = el("input");
            reason.id = "reason-" + id; reason.name = "reason"; reason.required = true; reason.size = 40;
            form.appendChild(label);
            form.appendChild(reason);
            var row = el("div", "actions-row");
            [["approved", "Approve", ""], ["rejected", "Reject", "danger"]].forEach(function (b) {
              var button = el("button", b[2], b[1]);
              button.type = "submit"; button.name = "outcome"; button.value = b[0];
              row.appendChild(button);
            });
            form.appendChild(row);
            if (action && action.approval_floor === "admin" && action.requested_by === actor) {
              form.appendChild(el("p", "hint", "You asked for this plan. At the admin approval floor another person who can approve must approve it; you can reject it."));
            }
            box.appendChild(form);
          } else {
            var note = el("p", null, "Waiting for " + approvers + " to decide it on ");
            var link = el("a", null, "Approvals");
            link.href = "/approvals";
            note.appendChild(link);
            note.appendChild(document.createTextNode("."));
            box.appendChild(note);
          }
        })
        .catch(function () { box.textContent = "The action's state could not be read; open it from Approvals."; });
    }

    function approvalCard(card) {
      answer = null;
      var item = el("li", "card approval");
      item.setAttribute("data-action-id", card.action_id);
      item.appendChild(el("h3", null, "Approval needed"));
      var policy = card.policy || {};
      var resource = el("span");
      resource.appendChild(document.createTextNode((card.resource_name || "") + " "));
      resource.appendChild(code(card.resource_id));
      var link = el("a", null, "Action details");
      link.href = "/actions/" + encodeURIComponent(card.action_id);
      item.appendChild(facts([
        ["Resource", resource],
        ["Capability", code(card.capability)],
        ["Parameters", code(JSON.stringify(card.params || {}))],
        ["Plan hash", code(card.plan_hash)],
        ["Policy", [policy.outcome].concat(policy.reason_codes || []).filter(Boolean).join(" · ")],
        ["Requested by", card.requested_by],
        ["Action", link],
      ]));
      var box = el("div", "decision-box");
      item.appendChild(box);
      add(item);
      decision(box, card);
    }

    function questionCard(card) {
      answer = null;
      var item = el("li", "card question");
      item.appendChild(el("h3", null, "Question"));
      item.appendChild(el("p", "text", card.question));
      var options = card.options || [];
      if (options.length) {
        var list = el("ul");
        options.forEach(function (option) {
          list.appendChild(el("li", null, typeof option === "string" ? option : (option.label || option.value || JSON.stringify(option))));
        });
        item.appendChild(list);
      }
      item.appendChild(el("p", "hint", "Answer in the message box."));
      add(item);
    }

    function outcome(text, card) {
      answer = null;
      var item = el("li", "note outcome");
      item.appendChild(el("strong", "who", "Action outcome "));
      if (card && card.state) { item.appendChild(badge(card.state)); }
      if (card && card.verification) { item.appendChild(document.createTextNode(" ")); item.appendChild(badge(card.verification)); }
      item.appendChild(el("p", "text", text));
      add(item);
    }

    function note(kind, title, text) {
      answer = null;
      var item = el("li", "note " + kind);
      if (kind === "error") { item.setAttribute("role", "alert"); }
      item.appendChild(el("strong", "who", title));
      item.appendChild(el("p", "text", text));
      add(item);
    }

    function ended(text) {
      answer = null;
      add(el("li", "turn-end hint", text));
    }

    function setStreaming(on) {
      streaming = on;
      send.disabled = on;
      stop.disabled = !on || !sessionField.value;
      form.setAttribute("aria-busy", on ? "true" : "false");
    }

    // A new chat joins the top of the list of chats.
    function listed(id, title) {
      var nav = document.querySelector(".sessions");
      if (!nav) { return; }
      var list = nav.querySelector("ul");
      if (!list) {
        var empty = nav.querySelector("p.hint");
        if (empty) { nav.removeChild(empty); }
        list = nav.appendChild(el("ul"));
      }
      var current = nav.querySelector("a[aria-current]");
      if (current) { current.removeAttribute("aria-current"); }
      var link = el("a", null, title);
      link.href = "/chat/" + encodeURIComponent(id);
      link.setAttribute("aria-current", "page");
      var item = el("li");
      item.appendChild(link);
      list.insertBefore(item, list.firstChild);
    }

    function dollars(value) {
      var amount = Number(value);
      if (value === undefined || value === null || isNaN(amount)) { return ""; }
      return "chat cost $" + (amount > 0 && amount < 0.01 ? amount.toFixed(4) : amount.toFixed(2));
    }

    function started(data) {
      if (!sessionField.value) {
        sessionField.value = data.session_id;
        root.setAttribute("data-session", data.session_id);
        if (level) { level.disabled = true; }
        document.getElementById("chat-title").textContent = data.title;
        if (window.history && window.history.replaceState) {
          window.history.replaceState(null, "", "/chat/" + encodeURIComponent(data.session_id));
        }
      }
      if (data.created) { listed(data.session_id, data.title); }
      stop.disabled = false;
      say("Working (control level " + String(data.control_level).replace(/_/g, " ") + ", scope: " + data.control_scope + ").");
    }

    var terminal = false;
    function handle(name, data) {
      switch (name) {
        case "session": started(data); break;
        case "workflow_state": say(data.label || data.state); break;
        case "stream_idle": say(data.label || "Waiting for the model."); break;
        case "content": answerText(data.text || ""); break;
        case "tool_start":
        case "tool_progress":
          toolRow({ id: data.id, name: data.name, input: data.raw_input, state: "pending" });
          say((labels[data.name] || "Using a tool") + "…");
          break;
        case "tool_end":
          toolRow({ id: data.id, name: data.name, input: data.raw_input, output: data.output,
            state: data.success ? "done" : "failed", duration: data.duration_ms });
          break;
        case "tool_cancel":
          toolRow({ id: data.id, name: data.name, input: data.raw_input, reason: data.reason, state: "cancelled" });
          break;
        case "approval_needed": approvalCard(data); say("An action was planned; it waits for approval."); break;
        case "action_outcome": outcome(data.text, data); break;
        case "question": questionCard(data); break;
        case "steer_applied": note("steer", "Steering applied", data.text || ""); break;
        case "done":
          terminal = true;
          ended(["Done", data.input_tokens + " in / " + data.output_tokens + " out tokens",
            dollars(data.session_cost_usd),
            data.model_route || ""].filter(Boolean).join(" · "));
          say("The answer is complete.");
          break;
        case "error":
          terminal = true;
          note("error", "Stopped", (data.message || "The turn failed.") + " (" + (data.code || "error") + ")");
          say("The turn ended with an error: " + (data.message || data.code));
          break;
        default: break;
      }
    }

    form.addEventListener("submit", function (e) {
      e.preventDefault();
      var text = prompt.value;
      if (streaming || !text.trim()) { return; }
      var body = new URLSearchParams(new FormData(form));
      terminal = false;
      userRow(text);
      prompt.value = "";
      setStreaming(true);
      say("Sending…");
      fetch(form.action, { method: "POST", credentials: "same-origin", body: body,
        headers: { Accept: "text/event-stream" } })
        .then(function (response) {
          var type = response.headers.get("content-type") || "";
          if (!response.ok || !response.body || type.indexOf("text/event-stream") < 0) {
            return refusal(response).then(function (why) {
              terminal = true;
              note("error", "Refused", why.message + " (" + why.code + ")");
              say("Refused: " + why.message);
            });
          }
          return readEvents(response, handle);
        })
        .catch(function (err) { note("error", "Connection lost", String(err && err.message || err)); })
        .then(function () {
          if (!terminal) {
            note("error", "Connection lost", "The answer stopped before the turn ended; reload the chat to see what was kept.");
          }
          setStreaming(false);
        });
    });

    stop.addEventListener("click", function () {
      if (!sessionField.value) { return; }
      var body = new URLSearchParams();
      body.set("csrf", csrfToken);
      say("Stopping…");
      fetch("/chat/" + encodeURIComponent(sessionField.value) + "/stop",
        { method: "POST", credentials: "same-origin", body: body })
        .then(function (response) {
          if (response.ok) { return; }
          return refusal(response).then(function (why) { say("Stop was refused: " + why.message + " (" + why.code + ")"); });
        })
        .catch(function () { say("Stop could not reach the gateway."); });
    });

    // A resumed chat: its transcript, restored from the messages route.
    var session = root.getAttribute("data-session");
    if (!session) { return; }
    say("Loading the transcript…");
    fetch("/api/ai/sessions/" + encodeURIComponent(session) + "/messages", { credentials: "same-origin" })
      .then(function (r) {
        if (!r.ok) { return refusal(r).then(function (why) { throw new Error(why.message + " (" + why.code + ")"); }); }
        return r.json();
      })
      .then(function (restored) {
        restored.messages.forEach(function (m) {
          var tool = m.tool || {};
          switch (m.role) {
            case "user": userRow(m.text); break;
            case "assistant":
              answer = null;
              if (m.text) { answerText(m.text); }
              answer = null;
              break;
            case "tool":
              toolRow({ id: tool.call_id, name: tool.name, input: tool.input, output: tool.output,
                reason: tool.reason, state: m.state === "running" ? "pending" : m.state });
              break;
            case "approval": approvalCard(m.card || {}); break;
            case "question": questionCard(m.card || {}); break;
            case "outcome": outcome(m.text, m.card); break;
            case "summary": note("summary", "Earlier messages, summarized", m.text); break;
            case "steer": note("steer", "Steering", m.text); break;
            case "error": note("error", "Stopped", m.text); break;
            default: break;
          }
        });
        if (restored.session.status === "running") {
          stop.disabled = false;
          say("A turn is still running in this chat; Stop ends it.");
        } else {
          say("");
        }
      })
      .catch(function (err) { say("The transcript could not be loaded: " + err.message); });
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
    var chatRoot = document.getElementById("chat");
    if (chatRoot) { chat(chatRoot); }
    // Ask before a form marked data-confirm is sent.
    document.querySelectorAll("form[data-confirm]").forEach(function (form) {
      form.addEventListener("submit", function (e) {
        if (!window.confirm(form.getAttribute("data-confirm"))) { e.preventDefault(); }
      });
    });
  });
})();
