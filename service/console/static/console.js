// A form with data-confirm asks before it is sent (a retire, an apply, an import, a reset, a deletion).
document.addEventListener("submit", (event) => {
  const message = event.target.dataset.confirm;
  if (message && !window.confirm(message)) {
    event.preventDefault();
  }
});
