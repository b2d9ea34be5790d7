// A filter's choice applies at once (the form still works without script: a button).
for (const el of document.querySelectorAll("select.autosubmit")) {
  el.addEventListener("change", () => el.form.submit());
}
