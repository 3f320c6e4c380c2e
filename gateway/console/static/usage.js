// Draws the usage page's chart from the JSON the server put in #usage-data.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var source = document.getElementById("usage-data");
  var canvas = document.getElementById("usage-chart");
  if (!source || !canvas || typeof Chart === "undefined") {
    return;
  }
  var data = JSON.parse(source.textContent);
  new Chart(canvas, {
    type: "bar",
    data: {
      labels: data.days,
      datasets: [
        { label: "tokens", data: data.tokens, yAxisID: "tokens" },
        { label: "cost (USD)", data: data.cost, yAxisID: "cost", type: "line" }
      ]
    },
    options: {
      responsive: true,
      maintainAspectRatio: false,
      animation: false,
      scales: {
        tokens: { type: "linear", position: "left", beginAtZero: true },
        cost: { type: "linear", position: "right", beginAtZero: true, grid: { drawOnChartArea: false } }
      }
    }
  });
  canvas.setAttribute("data-drawn", "1");
});
