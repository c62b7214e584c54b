// Progressive enhancement: a column header sorts its table (click, or Enter/Space when it has
// the keyboard focus); aria-sort says which column sorts and which way. Tables read fine
// without it. A cell sorts by its data-sort value where it has one, else by its text;
// numbers sort numerically, before text, and empty cells ("-") last either way.
document.querySelectorAll("table.sortable").forEach((table) => {
  const headers = Array.from(table.querySelectorAll("thead th"));
  const key = (row, column) => {
    const cell = row.cells[column];
    const raw = cell ? (cell.dataset.sort ?? cell.textContent.trim()) : "";
    if (raw === "" || raw === "-") return [2, ""];
    const number = Number(raw);
    return Number.isNaN(number) || raw.trim() === "" ? [1, raw.toLowerCase()] : [0, number];
  };
  const sortBy = (header, column) => {
    const ascending = header.getAttribute("aria-sort") !== "ascending";
    headers.forEach((h) => h.setAttribute("aria-sort", "none"));
    header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    const body = table.tBodies[0];
    const rows = Array.from(body.rows).sort((a, b) => {
      const [ka, x] = key(a, column), [kb, y] = key(b, column);
      if (ka !== kb) return ka - kb; // empty cells stay last whichever the direction
      return (x < y ? -1 : x > y ? 1 : 0) * (ascending ? 1 : -1);
    });
    rows.forEach((row) => body.appendChild(row));
  };
  headers.forEach((header, column) => {
    header.tabIndex = 0;
    header.setAttribute("aria-sort", "none");
    header.title = header.title || "Sort by this column (Enter)";
    header.addEventListener("click", () => sortBy(header, column));
    header.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") {
        event.preventDefault();
        sortBy(header, column);
      }
    });
  });
});
