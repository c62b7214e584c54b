// Progressive enhancement: a search box and tag buttons above the page's entry tables. Rows
// that carry data-tags (entries, paper rows, the index's sub-benchmarks) are hidden unless
// every typed word occurs in the row's text or one of its tags, and the row has every tag
// pressed. A row's tags: its data-tags (";"-separated), the words of its badges and its
// table's protocol. Without the script no control is shown and every row stays visible.
(() => {
  const rows = Array.from(document.querySelectorAll("tbody tr[data-tags]"));
  if (rows.length < 2) return;
  const tagsOf = (row) => {
    const tags = new Set();
    const add = (text) => {
      const tag = (text || "").trim();
      if (tag) tags.add(tag);
    };
    (row.dataset.tags || "").split(";").forEach(add);
    row.querySelectorAll(".badge").forEach((badge) => add(badge.textContent));
    add(row.closest("table")?.dataset.protocol);
    return tags;
  };
  const items = rows.map((row) => ({ row, tags: tagsOf(row), text: row.textContent.toLowerCase() }));
  const allTags = Array.from(new Set(items.flatMap((item) => Array.from(item.tags)))).sort();
  const pressed = new Set();

  const form = document.createElement("form");
  form.className = "filter";
  form.setAttribute("role", "search");
  form.addEventListener("submit", (event) => event.preventDefault());
  const label = document.createElement("label");
  label.append("Filter rows ");
  const input = document.createElement("input");
  input.type = "search";
  input.className = "filter-text";
  input.placeholder = "method, model or tag";
  label.append(input);
  const group = document.createElement("span");
  group.className = "filter-tags";
  group.setAttribute("role", "group");
  group.setAttribute("aria-label", "Show only rows with these tags");
  const status = document.createElement("span");
  status.className = "filter-status pm";
  status.setAttribute("aria-live", "polite");

  const apply = () => {
    const words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
    let shown = 0;
    items.forEach(({ row, tags, text }) => {
      const lowered = Array.from(tags, (tag) => tag.toLowerCase());
      const visible =
        words.every((word) => text.includes(word) || lowered.some((tag) => tag.includes(word))) &&
        Array.from(pressed).every((tag) => tags.has(tag));
      row.hidden = !visible;
      shown += visible ? 1 : 0;
    });
    const active = words.length > 0 || pressed.size > 0;
    status.textContent = active ? `${shown} of ${items.length} rows shown` : "";
  };

  allTags.forEach((tag) => {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "filter-tag";
    button.textContent = tag;
    button.setAttribute("aria-pressed", "false");
    button.addEventListener("click", () => {
      if (pressed.has(tag)) pressed.delete(tag);
      else pressed.add(tag);
      button.setAttribute("aria-pressed", String(pressed.has(tag)));
      apply();
    });
    group.append(button);
  });
  input.addEventListener("input", apply);
  form.append(label, group, status);
  const lead = document.querySelector("main p.lead");
  if (lead) lead.after(form);
  else document.querySelector("main")?.prepend(form);
})();
