// A display equation wider than its column is drawn smaller until it fits. MathJax 3 breaks no
// line by itself: the pages break their long equations at operators, so that every one fits a
// desktop column at its own size, and only on a narrow screen is what remains too wide scaled,
// never below MIN_SCALE (past that it scrolls, with the cue of course.css).
"use strict";
(() => {
  const MIN_SCALE = 0.55;

  const fit = () => {
    for (const box of document.querySelectorAll('mjx-container[display="true"]')) {
      const math = box.querySelector("mjx-math");
      if (!math) continue;
      if (box.dataset.courseSize === undefined) box.dataset.courseSize = box.style.fontSize || "";
      box.style.fontSize = box.dataset.courseSize; // MathJax's own size first, then measure
      delete box.dataset.courseScale;
      const need = math.getBoundingClientRect().width, room = box.clientWidth - 2;
      if (room > 0 && need > room) {
        const scale = Math.max(MIN_SCALE, room / need);
        box.style.fontSize = `${parseFloat(getComputedStyle(box).fontSize) * scale}px`;
        box.dataset.courseScale = scale.toFixed(3);
      }
    }
  };

  let pending = null;
  const refit = () => {
    clearTimeout(pending);
    pending = setTimeout(fit, 100);
  };

  const start = () => {
    const ready = window.MathJax && MathJax.startup && MathJax.startup.promise;
    (ready || Promise.resolve()).then(fit);
    window.addEventListener("resize", refit);
  };
  if (document.readyState === "complete") start();
  else window.addEventListener("load", start);
})();
