// SchedulerTimeline view: its one drawing (lanes per request, the per-step strips) is a
// plotly FigureWidget built in Python (inferlab.lab.drawings.timeline), mounted by ilPlot.
function render({ model, el }) {
  const root = ilEl("div", "il-view il-timeline", el);
  ilLive(model, root);
  const box = ilEl("div", "il-plot il-tl-plot", root);
  ilScrubber(model, root, () => {});
  return ilPlot(model, root, box, ["num_steps", "cursor"]);
}

export default { render };
