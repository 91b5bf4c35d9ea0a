// workhorse dashboard: progressive enhancement only. Every page works without this file.
(function () {
  "use strict";
  // Actions: ask before posting. Accepted, the form says so (confirm=yes) and the server acts;
  // without this script the server answers with a page asking to confirm instead. A bulk verb
  // (data-count) first reads how many jobs it would move, so the question says the number; if that
  // read fails, the form posts unconfirmed and the server's confirm page says it.
  function confirmed(form) {
    var field = document.createElement("input");
    field.type = "hidden"; field.name = "confirm"; field.value = "yes";
    form.appendChild(field);
  }
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!(form instanceof HTMLFormElement) || !form.classList.contains("act")) return;
    var counting = form.getAttribute("data-count");
    if (counting) {
      event.preventDefault();
      fetch(counting, { credentials: "same-origin", headers: { "Accept": "application/json" } })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (answer) {
          if (answer && typeof answer.question === "string") {
            if (!window.confirm(answer.question)) return;
            confirmed(form);
          }
          form.submit();  // unconfirmed when the count failed: the server asks, with the count
        })
        .catch(function () { form.submit(); });
      return;
    }
    var question = form.getAttribute("data-confirm") || "Are you sure?";
    if (!window.confirm(question)) { event.preventDefault(); return; }
    confirmed(form);
  });

  // The overview's live refresh: the queue table's markup, rendered (and escaped) by the server,
  // fetched every few seconds while the tab is visible and swapped in place.
  var live = document.getElementById("live");
  if (!live) return;
  var every = Math.max(1, parseFloat(live.getAttribute("data-every") || "5")) * 1000;
  var url = live.getAttribute("data-live");
  var busy = false;
  function refresh() {
    if (busy || document.hidden) return;
    busy = true;
    fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html === null) { live.setAttribute("data-stale", "1"); return; }  // keep the last numbers, say so
        live.innerHTML = html;
        live.removeAttribute("data-stale");
        live.setAttribute("data-refreshed", String(Date.now()));
      })
      .catch(function () { live.setAttribute("data-stale", "1"); })
      .then(function () { busy = false; });
  }
  setInterval(refresh, every);
  document.addEventListener("visibilitychange", function () { if (!document.hidden) refresh(); });
})();
