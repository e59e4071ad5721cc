// A form with data-confirm asks before it is sent (retiring an arm deletes what was learned).
document.addEventListener("submit", (event) => {
  const message = event.target.dataset.confirm;
  if (message && !window.confirm(message)) {
    event.preventDefault();
  }
});
