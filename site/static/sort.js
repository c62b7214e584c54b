// Progressive enhancement: click a column header to sort. Tables read fine without it.
document.querySelectorAll("table.sortable").forEach((table) => {
  table.querySelectorAll("thead th").forEach((header, column) => {
    header.addEventListener("click", () => {
      const body = table.tBodies[0];
      const ascending = header.dataset.order !== "asc";
      header.dataset.order = ascending ? "asc" : "desc";
      const key = (row) => {
        const cell = row.cells[column];
        const raw = cell ? (cell.dataset.sort ?? cell.textContent.trim()) : "";
        const number = parseFloat(raw);
        return Number.isNaN(number) ? raw.toLowerCase() : number;
      };
      const rows = Array.from(body.rows).sort((a, b) => {
        const x = key(a), y = key(b);
        return (x < y ? -1 : x > y ? 1 : 0) * (ascending ? 1 : -1);
      });
      rows.forEach((row) => body.appendChild(row));
    });
  });
});
