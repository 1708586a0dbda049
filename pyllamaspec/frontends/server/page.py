"""The chat page the server shows at / (as llama-server shows its web UI there): one HTML file,
no build step, no outside resources. It talks to /v1/chat/completions with streaming, keeps the
conversation in the page, and shows each answer's speed and how many drafted tokens were
accepted (llama-server's timings). Text is put in the page as text, never as HTML."""

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>pyllamaspec: {{MODEL}}</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 0; background: #f6f6f4; color: #222; }
  header { padding: .6rem 1rem; background: #2d4a3e; color: #fff; display: flex; gap: 1rem; align-items: center; }
  header h1 { font-size: 1rem; margin: 0; font-weight: 600; }
  header input { margin-left: auto; padding: .2rem .4rem; }
  #log { max-width: 50rem; margin: 0 auto; padding: 1rem; }
  .msg { white-space: pre-wrap; padding: .6rem .8rem; border-radius: .5rem; margin: .5rem 0; }
  .user { background: #dfe9e4; margin-left: 3rem; }
  .assistant { background: #fff; margin-right: 3rem; border: 1px solid #ddd; }
  .stats { font-size: .75rem; color: #667; margin: -.3rem 0 .6rem .2rem; }
  .error { background: #fbe3e3; border: 1px solid #e0a0a0; }
  form { max-width: 50rem; margin: 0 auto; padding: 0 1rem 1rem; display: flex; gap: .5rem; }
  textarea { flex: 1; min-height: 3rem; padding: .5rem; font: inherit; }
  button { padding: .5rem 1rem; font: inherit; }
</style>
</head>
<body>
<header><h1>pyllamaspec &middot; {{MODEL}}</h1>
  <button id="clear" type="button">New chat</button>
  <input id="key" type="password" placeholder="API key (if the server has one)" autocomplete="off"></header>
<main id="log"></main>
<form id="form">
  <textarea id="input" placeholder="Message (Enter sends, Shift+Enter: new line)"></textarea>
  <button id="send" type="submit">Send</button>
</form>
<script>
"use strict";
const log = document.getElementById("log"), input = document.getElementById("input");
const keyBox = document.getElementById("key"), send = document.getElementById("send");
let messages = [];
keyBox.value = localStorage.getItem("pyllamaspec-key") || "";
keyBox.addEventListener("change", () => localStorage.setItem("pyllamaspec-key", keyBox.value));

function bubble(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  div.textContent = text;
  log.appendChild(div);
  window.scrollTo(0, document.body.scrollHeight);
  return div;
}

function describe(t) {
  if (!t || t.predicted_n === undefined) return "";
  let s = t.predicted_n + " tokens at " + t.predicted_per_second.toFixed(1) + " t/s";
  if (t.draft_n !== undefined) {
    s += " | drafted " + t.draft_n + ", accepted " + t.draft_n_accepted +
         " (" + (100 * t.draft_acceptance).toFixed(0) + "%), " + t.tokens_per_round.toFixed(2) + " tokens per round";
  }
  return s + " | prompt: " + t.prompt_n + " evaluated, " + t.cache_n + " from the cache";
}

async function ask(text) {
  messages.push({role: "user", content: text});
  bubble("user", text);
  const out = bubble("assistant", "");
  const stats = document.createElement("div");
  stats.className = "stats";
  log.appendChild(stats);
  const headers = {"Content-Type": "application/json"};
  if (keyBox.value) headers["Authorization"] = "Bearer " + keyBox.value;
  send.disabled = true;
  let answer = "";
  try {
    const r = await fetch("/v1/chat/completions", {method: "POST", headers,
      body: JSON.stringify({messages, stream: true})});
    if (!r.ok) {
      const e = await r.json().catch(() => ({}));
      throw new Error((e.error && e.error.message) || ("HTTP " + r.status));
    }
    const reader = r.body.getReader(), dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const {done, value} = await reader.read();
      if (done) break;
      buf += dec.decode(value, {stream: true});
      let i;
      while ((i = buf.indexOf("\\n\\n")) >= 0) {
        const line = buf.slice(0, i).trim();
        buf = buf.slice(i + 2);
        if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
        const chunk = JSON.parse(line.slice(6));
        if (chunk.error) throw new Error(chunk.error.message);
        const delta = chunk.choices && chunk.choices[0] && chunk.choices[0].delta;
        if (delta && delta.content) { answer += delta.content; out.textContent = answer; }
        if (chunk.timings) stats.textContent = describe(chunk.timings);
      }
    }
    messages.push({role: "assistant", content: answer});
  } catch (e) {
    out.className = "msg assistant error";
    out.textContent = "error: " + e.message;
    messages.pop();
  } finally {
    send.disabled = false;
    input.focus();
  }
}

document.getElementById("form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const text = input.value.trim();
  if (!text || send.disabled) return;
  input.value = "";
  ask(text);
});
input.addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); document.getElementById("form").requestSubmit(); }
});
document.getElementById("clear").addEventListener("click", () => { messages = []; log.textContent = ""; });
</script>
</body>
</html>
"""

__all__ = ["PAGE"]
