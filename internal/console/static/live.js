// Live updates of a console page: <main data-live="URL"> names a stream of
// server-sent events; on a "change" the page reloads, or, while the
// keyboard's focus is on something of the page (reloading would lose it),
// says so with a link to reload. Without this script the pages work the same.
(function () {
  "use strict";
  var main = document.querySelector("main[data-live]");
  if (!main || !window.EventSource) {
    return;
  }
  var es = new EventSource(main.getAttribute("data-live"));
  var pending = false;
  es.addEventListener("change", function () {
    if (pending) {
      return;
    }
    pending = true;
    setTimeout(function () {
      var f = document.activeElement;
      if (!f || f === document.body) {
        es.close();
        window.location.reload();
        return;
      }
      var note = document.getElementById("live-note");
      if (note) {
        note.hidden = false;
      }
      pending = false;
    }, 300);
  });
  es.onerror = function () {
    if (es.readyState === EventSource.CLOSED) {
      main.removeAttribute("data-live");
    }
  };
})();
