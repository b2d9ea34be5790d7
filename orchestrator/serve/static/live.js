// A run's progress, asked of /api/live/<run> every few seconds while the run goes: the
// server reads the run folder each time; the page is never reloaded.
(function () {
  const box = document.getElementById("live");
  if (!box) return;
  const url = box.dataset.url, every = Number(box.dataset.pollMs) || 2000;

  function text(tag, value, cls) {
    const el = document.createElement(tag);
    el.textContent = value === null || value === undefined ? "-" : String(value);
    if (cls) el.className = cls;
    return el;
  }
  function num(x, digits) {
    return typeof x === "number" && isFinite(x) ? x.toPrecision(digits || 4).replace(/\.?0+$/, "") : "-";
  }
  function secs(s) {
    if (typeof s !== "number") return "-";
    if (s < 90) return Math.round(s) + " s";
    if (s < 5400) return (s / 60).toFixed(1) + " min";
    const m = Math.round(s / 60);
    return Math.floor(m / 60) + " h " + String(m % 60).padStart(2, "0") + " min";
  }
  function rows(tbody, items, cells) {
    tbody.replaceChildren(...items.map((it) => {
      const tr = document.createElement("tr");
      for (const c of cells(it)) tr.append(c);
      return tr;
    }));
  }

  function show(p) {
    const state = document.getElementById("state");
    state.textContent = p.state;
    state.className = "state " + p.state;
    const r = p.row;
    const kind = document.getElementById("fact-kind");
    kind.textContent = r.kind;
    kind.className = "kind " + r.kind;
    document.getElementById("fact-k").textContent = num(r.k);
    document.getElementById("fact-valid").textContent = `${r.valid}/${p.total}`;
    document.getElementById("fact-claims").textContent = r.claims_total ? `${r.claims_held}/${r.claims_total}` : "-";
    document.getElementById("fact-duration").textContent = secs(p.elapsed_s);
    const c = p.counts;
    const summary = document.getElementById("live-summary");
    summary.replaceChildren();
    const bar = document.createElement("span");
    bar.className = "bar";
    const fill = document.createElement("span");
    fill.style.width = (p.total ? (100 * (c.done + c.failed)) / p.total : 0) + "%";
    bar.append(fill);
    summary.append(bar, text("span", `${c.done} of ${p.total} points done, ${c.todo + c.running} to do` +
      (c.failed ? `, ${c.failed} failed` : "") + `; elapsed ${secs(p.elapsed_s)}` +
      (p.eta_left_s !== null ? `, ETA ${secs(p.eta_left_s)}` : "") +
      (p.eta && p.state === "running" ? ` (the run's estimate at point ${p.current ? p.current.index : "?"}: ${p.eta.text})` : ""), "live-counts"));
    const cur = document.getElementById("live-current");
    if (p.current) {
      let s = `Now: point ${p.current.index} of ${p.current.of}, ${p.current.point}`;
      if (p.current.segment) s += `, segment ${p.current.segment} of ${p.current.segments} (${p.current.segment_s} s)` + (p.current.again ? `, again (${p.current.again})` : "");
      cur.textContent = s;
    } else {
      cur.textContent = p.state === "running" ? "Now: before the first point (preflight, switch, calibration)" : "";
    }
    rows(document.querySelector("#live-points tbody"), p.points, (pt) => [
      text("td", pt.id), text("td", pt.status, "status-" + pt.status),
      text("td", pt.valid === null ? "-" : pt.valid ? "yes" : "no"), text("td", pt.attempts),
      text("td", typeof pt.wall_s === "number" ? secs(pt.wall_s) : "-"),
    ]);
    rows(document.querySelector("#live-landed tbody"), p.landed.slice().reverse(), (l) => [
      text("td", l.point), text("td", l.segment === null ? "whole window" : l.segment),
      text("td", l.requests, "num"), text("td", num(l.p99_us), "num"),
      text("td", num(l.model_p99_us), "num"), text("td", num(l.ratio, 3), "num"),
      text("td", l.valid === null ? "-" : l.valid ? "yes" : "no: " + l.failed.join(", ")),
    ]);
    document.getElementById("live-log").textContent = p.log_tail.join("\n");
    const probs = document.getElementById("live-problems");
    probs.hidden = !p.problems.length;
    probs.textContent = p.problems.join("; ");
    if (box.dataset.state === "running" && p.state !== "running") {
      const note = text("p", "The run is " + p.state + ": reload the page for its report, figures and verdicts.", "note");
      note.id = "live-ended";
      box.append(note);
    }
    box.dataset.state = p.state;
    box.dataset.done = String(c.done);
  }

  async function poll() {
    try {
      const r = await fetch(url, { cache: "no-store" });
      if (r.ok) show(await r.json());
    } catch (e) {
      // the server went away: keep what is shown, try again
    }
    if (box.dataset.state === "running") setTimeout(poll, every);
  }
  poll();
})();
