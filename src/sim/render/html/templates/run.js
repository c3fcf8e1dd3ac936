// The run page's one script: select a message (click, keys, links), show its details, step through.
(function () {
  "use strict";
  var rows = Array.prototype.slice.call(document.querySelectorAll("[data-message]"));
  var position = document.getElementById("position");
  var empty = document.getElementById("inspector-empty");
  var current = -1;
  var stepping = false;

  function detail(row) { return document.getElementById("detail-" + row.id); }

  function paint() {
    rows.forEach(function (row, index) {
      row.classList.toggle("selected", index === current);
      row.classList.toggle("future", stepping && index > current);
      row.setAttribute("aria-pressed", index === current ? "true" : "false");
    });
    var text = current < 0 ? "" : "message " + (current + 1) + " of " + rows.length + " (" + rows[current].id + ")";
    position.textContent = text + (stepping ? " \u2014 step mode: Esc shows everything" : "");
  }

  function select(index, scroll) {
    if (rows.length === 0) { return; }
    index = Math.max(0, Math.min(rows.length - 1, index));
    if (current >= 0) { detail(rows[current]).hidden = true; }
    current = index;
    empty.hidden = true;
    detail(rows[current]).hidden = false;
    paint();
    if (scroll) { rows[current].scrollIntoView({ block: "nearest" }); }
    history.replaceState(null, "", "#" + rows[current].id);
  }

  rows.forEach(function (row, index) {
    row.addEventListener("click", function () { select(index, false); });
  });
  Array.prototype.forEach.call(document.querySelectorAll("[data-goto]"), function (link) {
    link.addEventListener("click", function (event) {
      var index = rows.indexOf(document.getElementById(link.getAttribute("data-goto")));
      if (index >= 0) { event.preventDefault(); select(index, true); }
    });
  });
  document.addEventListener("keydown", function (event) {
    if (event.altKey || event.ctrlKey || event.metaKey) { return; }
    switch (event.key) {
      case "j": case "ArrowDown": case "n": select(current + 1, true); break;
      case "k": case "ArrowUp": case "p": select(current < 0 ? 0 : current - 1, true); break;
      case "Home": select(0, true); break;
      case "End": select(rows.length - 1, true); break;
      case "s": stepping = !stepping; if (current < 0) { select(0, true); } else { paint(); } break;
      case "Escape": stepping = false; paint(); break;
      default: return;
    }
    event.preventDefault();
  });
  var start = rows.indexOf(document.getElementById(location.hash.slice(1)));
  if (start >= 0) { select(start, true); }
})();
