// TokenStream view: its one drawing (every request's tokens on one time axis) is a plotly
// FigureWidget built in Python (inferlab.lab.drawings.token_stream), mounted by ilPlot in a
// box that scrolls: the figure grows by one lane per request, nothing is cut.
function render({ model, el }) {
  const root = ilEl("div", "il-view il-token-stream", el);
  ilLive(model, root);
  const box = ilEl("div", "il-plot il-ts-plot", root);
  ilScrubber(model, root, () => {});
  return ilPlot(model, root, box, ["num_steps", "cursor"]);
}

export default { render };
