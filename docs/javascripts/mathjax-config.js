// pymdownx.arithmatex (generic) wraps math in .arithmatex; MathJax 3 typesets only those.
window.MathJax = {
  tex: { inlineMath: [["\\(", "\\)"]], displayMath: [["\\[", "\\]"]], processEscapes: true, processEnvironments: true },
  options: { ignoreHtmlClass: ".*|", processHtmlClass: "arithmatex" },
};
document$.subscribe(() => { if (window.MathJax && MathJax.typesetPromise) { MathJax.typesetPromise(); } });
