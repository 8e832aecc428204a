// Typo suggestions: Damerau-Levenshtein (optimal string alignment) distance over known names.

export function editDistance(a: string, b: string): number {
  const m = a.length;
  const n = b.length;
  const d: number[][] = Array.from({ length: m + 1 }, (_, i) => Array.from({ length: n + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  for (let i = 1; i <= m; i++) {
    for (let j = 1; j <= n; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      d[i][j] = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d[i][j] = Math.min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[m][n];
}

/**
 * Up to `limit` names close to `input`: within a third of its length in edits (at least 2), or
 * containing it as a whole word-ish substring ("qwen3" -> "qwen3-4b-4bit"), nearest first.
 */
export function suggest(input: string, names: string[], limit = 3): string[] {
  const q = input.toLowerCase();
  const budget = Math.max(2, Math.floor(q.length / 3));
  const scored: { name: string; score: number }[] = [];
  for (const name of new Set(names)) {
    const n = name.toLowerCase();
    const dist = editDistance(q, n);
    if (dist <= budget) scored.push({ name, score: dist });
    else if (q.length >= 3 && n.includes(q)) scored.push({ name, score: budget + 1 + (n.length - q.length) / 100 });
  }
  scored.sort((x, y) => x.score - y.score || x.name.localeCompare(y.name));
  return scored.slice(0, limit).map((s) => s.name);
}
