"""Hand-written SVG figures: the text-width model, axes and the plot kinds of site and analyses."""
