// Shared helpers, prepended to each view's ESM by Python (no imports, no network).
// Each view's picture is a plotly FigureWidget built in Python (ilPlot mounts it); the JS
// keeps only what plotly cannot do: the live badge, the scrubber, a few HTML lines. Colours:
// the palette lives in inferlab/lab/palette.py only (CSS variables on .il-view).
// a trait holding bytes (DataView) as a typed array
function ilArr(model, name, Type) {
  const dv = model.get(name);
  if (!dv || !dv.byteLength) return new Type(0);
  const buf = dv.buffer.slice(dv.byteOffset, dv.byteOffset + dv.byteLength);
  return new Type(buf);
}

function ilEl(tag, cls, parent, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}

function ilMs(s) {
  if (!isFinite(s)) return "–";
  const ms = s * 1e3;
  return ms >= 1000 ? (ms / 1e3).toFixed(2) + " s" : ms >= 10 ? ms.toFixed(0) + " ms"
    : ms.toFixed(1) + " ms";
}

// header: a "live" badge while the view follows an engine (the plot carries the title and
// the clock), hidden otherwise; returns the header element
function ilLive(model, root) {
  const head = ilEl("div", "il-header il-live", root);
  const badge = ilEl("span", "il-badge", head, "● live");
  const up = () => { head.style.display = model.get("live") ? "" : "none"; };
  model.on("change:live", up);
  up();
  return { el: head, badge };
}

// time scrubber over steps; the cursor trait round-trips to Python (-1 = follow latest)
function ilScrubber(model, root, onMove) {
  const bar = ilEl("div", "il-scrubber", root);
  const input = ilEl("input", "il-scrub-input", bar);
  input.type = "range"; input.min = 0; input.step = 1;
  const label = ilEl("span", "il-scrub-label", bar);
  const latest = ilEl("button", "il-scrub-latest", bar, "latest");
  const sync = () => {
    const n = model.get("num_steps");
    const c = model.get("cursor");
    const times = ilArr(model, "step_times", Float64Array);
    const k = c < 0 || c >= n ? n - 1 : c;
    input.max = Math.max(n - 1, 0);
    input.value = Math.max(k, 0);
    input.disabled = n === 0;
    label.textContent = n ? `step ${k + 1}/${n} · t = ${ilMs(times[k])}` : "no steps yet";
    latest.disabled = c < 0;
  };
  input.addEventListener("input", () => {
    model.set("cursor", parseInt(input.value, 10)); model.save_changes(); sync(); onMove();
  });
  latest.addEventListener("click", () => {
    model.set("cursor", -1); model.save_changes(); sync(); onMove();
  });
  model.on("change:num_steps", sync); model.on("change:cursor", sync);
  model.on("change:step_times", sync);
  sync();
  return { el: bar };
}

// Redraw when JupyterLab switches theme: the new theme's stylesheet lands a moment after the
// body's data-jp-theme-* attributes change, so call at once and twice more shortly after.
// Returns the disconnect function.
function ilOnThemeChange(redraw) {
  const again = () => { redraw(); setTimeout(redraw, 300); setTimeout(redraw, 1200); };
  const mo = new MutationObserver(again);
  mo.observe(document.body, { attributes: true,
    attributeFilter: ["data-jp-theme-light", "data-jp-theme-name"] });
  return () => mo.disconnect();
}

// The view's one drawing: the plotly FigureWidget in the `plot` trait (built and updated in
// place by Python, widgets/_plot.py), mounted as a child view in `box`. Follows the page's
// theme into the `dark` trait, and counts the plot's redraws on `root` (data-draws, and
// data-draw-ms: from the last change of one of `marks` to the plot drawn), as the browser
// tests and `inferlab bench widgets` read them: one per animation frame in which plotly
// changed the plot's DOM. Returns the function that unmounts it.
function ilPlot(model, root, box, marks = []) {
  let view = null, gone = false, asked = 0;
  const mount = async () => {
    const ref = model.get("plot"), mine = ++asked;
    if (!ref) return;
    const child = await model.widget_manager.get_model(String(ref).replace(/^IPY_MODEL_/, ""));
    const v = await model.widget_manager.create_view(child, {});
    if (gone || mine !== asked) { v.remove(); return; }
    if (view) view.remove();
    view = v;
    box.replaceChildren(v.el);
    v.trigger("displayed");
    // plotly sizes itself to its box once attached: tell it the box is there now
    requestAnimationFrame(() => window.dispatchEvent(new Event("resize")));
    root.dataset.plot = child.model_id;
  };
  let since = null, queued = false;
  const drawn = () => {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => {
      queued = false;
      root.dataset.draws = String(parseInt(root.dataset.draws || "0", 10) + 1);
      if (since !== null) root.dataset.drawMs = String(performance.now() - since);
      since = null;
    });
  };
  // the plot follows its box's width (the output area settles after the first draw)
  let width = 0;
  const sized = new ResizeObserver(() => {
    const w = box.clientWidth;
    if (view && w !== width && w > 0) window.dispatchEvent(new Event("resize"));
    width = w;
  });
  sized.observe(box);
  const watch = new MutationObserver(drawn);
  watch.observe(box, { childList: true, subtree: true, attributes: true, characterData: true });
  const theme = () => {
    const dark = document.body.dataset.jpThemeLight === "false";
    if (model.get("dark") !== dark) { model.set("dark", dark); model.save_changes(); }
  };
  const mark = () => { since = performance.now(); };
  for (const m of marks) model.on("change:" + m, mark);
  // plotly's widget can miss a plot's first updates (_plot.py, PlotView._on_page_msg):
  // a plot showing fewer or more traces than the kernel's (plot_traces), a moment after a
  // draw, asks for a fresh widget (which opens with the whole figure); three times at most
  let resyncs = 0, checking = null, waiting = false;
  const check = () => {
    clearTimeout(checking);
    checking = setTimeout(() => {
      const div = view && (view.el.classList.contains("js-plotly-plot") ? view.el
        : view.el.querySelector(".js-plotly-plot"));
      if (gone || waiting || resyncs >= 3) return;
      if (!div || !div.data) { check(); return; }          // not drawn yet: look again
      // a plot drawn before its box was laid out keeps plotly's default 700 px (plotly.js
      // resizes a responsive plot, LiveFigure's config, on the window's resize event)
      const full = div._fullLayout;
      if (full && Math.abs(full.width - box.clientWidth) > 2 &&
          box.clientWidth > 0) window.dispatchEvent(new Event("resize"));
      if (div.data.length !== model.get("plot_traces")) {
        // (answered when the kernel is free: a cell still running holds it)
        resyncs += 1;
        waiting = true;
        model.send({ event: "resync" });
      }
    }, 1500);
  };
  model.on("change:plot_traces", check);
  // each redraw the kernel sent is answered once plotly has drawn it (the frame after):
  // the kernel sends the next one then (widgets/_plot.py, Throttle), so a page that falls
  // behind gets the latest state, never a queue of them
  model.on("change:plot_seq", () => {
    const seq = model.get("plot_seq");
    requestAnimationFrame(() => requestAnimationFrame(() => {
      if (gone || seq !== model.get("plot_seq")) return;
      model.send({ event: "drawn", seq });
      root.dataset.acks = String(parseInt(root.dataset.acks || "0", 10) + 1);
    }));
  });
  model.on("change:plot", () => { waiting = false; mount().then(check); });
  mount().then(check).catch((e) => { box.textContent = `the plot could not be shown (${e})`; });
  theme();
  const offTheme = ilOnThemeChange(theme);
  return () => { gone = true; clearTimeout(checking); watch.disconnect(); sized.disconnect(); offTheme(); if (view) view.remove(); };
}
