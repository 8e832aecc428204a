// Inline SVG charts for the HTML report, drawn from scratch (no library, no network): line charts
// over categorical x positions (the concurrency levels) and grouped bar charts, with nice y ticks.

export interface Series {
  name: string;
  color: string;
  /** One value per x label; null leaves a gap. */
  values: (number | null)[];
  dashed?: boolean;
}

export interface ChartOptions {
  id: string;
  title: string;
  xTitle: string;
  yTitle: string;
  xLabels: string[];
  series: Series[];
  /** Fixed top of the y axis (e.g. 100 for percentages). */
  yMax?: number;
  width?: number;
  height?: number;
}

export function escapeXml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

/** Round tick values from 0 to at least max: steps of 1, 2 or 5 x 10^k, about `count` of them. */
export function niceTicks(max: number, count = 5): number[] {
  if (!(max > 0)) return [0, 1];
  const raw = max / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw)!;
  const ticks: number[] = [];
  for (let v = 0; v < max + step * 1e-9; v += step) ticks.push(Number(v.toPrecision(12)));
  if (ticks[ticks.length - 1]! < max) ticks.push(Number((ticks[ticks.length - 1]! + step).toPrecision(12)));
  return ticks;
}

function tickLabel(v: number): string {
  if (v >= 10_000) return `${(v / 1000).toFixed(0)}k`;
  if (Number.isInteger(v)) return String(v);
  return v.toPrecision(3).replace(/\.?0+$/, '');
}

interface Frame {
  w: number;
  h: number;
  left: number;
  top: number;
  plotW: number;
  plotH: number;
  ticks: number[];
  yTop: number;
  y(v: number): number;
}

/** Legend entries placed left to right, wrapping to a new row when the width runs out. */
function legendLayout(o: ChartOptions, left: number, width: number): { x: number; row: number }[] {
  const out: { x: number; row: number }[] = [];
  let x = left;
  let row = 0;
  for (const s of o.series) {
    const itemW = 30 + s.name.length * 7;
    if (x > left && x + itemW > left + width) {
      row++;
      x = left;
    }
    out.push({ x, row });
    x += itemW;
  }
  return out;
}

function frame(o: ChartOptions): Frame {
  const w = o.width ?? 560;
  const left = 64;
  const top = 40;
  const plotW = w - left - 20;
  const legend = legendLayout(o, left, plotW);
  const extraRows = legend.length ? legend[legend.length - 1]!.row : 0;
  const h = (o.height ?? 320) + extraRows * 18;
  const plotH = h - top - 92 - extraRows * 18;
  const max = Math.max(0, ...o.series.flatMap((s) => s.values.filter((v): v is number => v !== null && Number.isFinite(v))));
  const ticks = o.yMax !== undefined ? niceTicks(o.yMax, 5) : niceTicks(max, 5);
  const yTop = ticks[ticks.length - 1]!;
  return { w, h, left, top, plotW, plotH, ticks, yTop, y: (v) => top + plotH - (v / yTop) * plotH };
}

function axes(o: ChartOptions, f: Frame, xAt: (i: number) => number): string[] {
  const parts: string[] = [];
  parts.push(`<text x="${f.w / 2}" y="22" text-anchor="middle" class="chart-title">${escapeXml(o.title)}</text>`);
  for (const t of f.ticks) {
    const y = f.y(t).toFixed(1);
    parts.push(`<line x1="${f.left}" x2="${f.left + f.plotW}" y1="${y}" y2="${y}" stroke="#e3e6ea"/>`);
    parts.push(`<text x="${f.left - 6}" y="${y}" dy="4" text-anchor="end" class="tick">${tickLabel(t)}</text>`);
  }
  parts.push(`<line x1="${f.left}" x2="${f.left}" y1="${f.top}" y2="${f.top + f.plotH}" stroke="#8a9199"/>`);
  parts.push(`<line x1="${f.left}" x2="${f.left + f.plotW}" y1="${f.top + f.plotH}" y2="${f.top + f.plotH}" stroke="#8a9199"/>`);
  o.xLabels.forEach((l, i) => parts.push(`<text x="${xAt(i).toFixed(1)}" y="${f.top + f.plotH + 18}" text-anchor="middle" class="tick">${escapeXml(l)}</text>`));
  parts.push(`<text x="${f.left + f.plotW / 2}" y="${f.top + f.plotH + 38}" text-anchor="middle" class="axis-title">${escapeXml(o.xTitle)}</text>`);
  parts.push(`<text transform="translate(16 ${f.top + f.plotH / 2}) rotate(-90)" text-anchor="middle" class="axis-title">${escapeXml(o.yTitle)}</text>`);
  // Legend under the axis title.
  legendLayout(o, f.left, f.plotW).forEach(({ x, row }, i) => {
    const s = o.series[i]!;
    const ly = f.top + f.plotH + 62 + row * 18;
    parts.push(`<rect x="${x}" y="${ly - 9}" width="14" height="10" fill="${s.color}"/>`);
    parts.push(`<text x="${x + 19}" y="${ly}" class="legend">${escapeXml(s.name)}</text>`);
  });
  return parts;
}

function svg(o: ChartOptions, f: Frame, kind: string, body: string[]): string {
  return (
    `<svg id="${escapeXml(o.id)}" class="chart" data-kind="${kind}" xmlns="http://www.w3.org/2000/svg" width="${f.w}" height="${f.h}" viewBox="0 0 ${f.w} ${f.h}" role="img" aria-label="${escapeXml(o.title)}">` +
    `<rect width="${f.w}" height="${f.h}" fill="#ffffff"/>${body.join('')}</svg>`
  );
}

export function lineChart(o: ChartOptions): string {
  const f = frame(o);
  const n = o.xLabels.length;
  const xAt = (i: number) => f.left + (n <= 1 ? f.plotW / 2 : 24 + (i * (f.plotW - 48)) / (n - 1));
  const parts = axes(o, f, xAt);
  for (const s of o.series) {
    let d = '';
    let pen = false;
    s.values.forEach((v, i) => {
      if (v === null || !Number.isFinite(v)) {
        pen = false;
        return;
      }
      d += `${pen ? 'L' : 'M'}${xAt(i).toFixed(1)},${f.y(v).toFixed(1)}`;
      pen = true;
    });
    if (d) parts.push(`<path class="series" d="${d}" fill="none" stroke="${s.color}" stroke-width="2.5"${s.dashed ? ' stroke-dasharray="6 4"' : ''}/>`);
    s.values.forEach((v, i) => {
      if (v === null || !Number.isFinite(v)) return;
      parts.push(`<circle class="point" cx="${xAt(i).toFixed(1)}" cy="${f.y(v).toFixed(1)}" r="4" fill="${s.color}"><title>${escapeXml(`${s.name} at ${o.xLabels[i]}: ${tickLabel(Number(v.toPrecision(4)))}`)}</title></circle>`);
    });
  }
  return svg(o, f, 'line', parts);
}

export function barChart(o: ChartOptions): string {
  const f = frame(o);
  const n = Math.max(1, o.xLabels.length);
  const slot = f.plotW / n;
  const xAt = (i: number) => f.left + slot * (i + 0.5);
  const parts = axes(o, f, xAt);
  const k = Math.max(1, o.series.length);
  const barW = Math.min(40, (slot * 0.7) / k);
  o.series.forEach((s, j) => {
    s.values.forEach((v, i) => {
      if (v === null || !Number.isFinite(v)) return;
      const x = xAt(i) - (k * barW) / 2 + j * barW;
      const y = f.y(v);
      parts.push(
        `<rect class="bar" x="${x.toFixed(1)}" y="${y.toFixed(1)}" width="${(barW - 2).toFixed(1)}" height="${Math.max(0, f.top + f.plotH - y).toFixed(1)}" fill="${s.color}"><title>${escapeXml(`${s.name} at ${o.xLabels[i]}: ${Number(v.toPrecision(4))}`)}</title></rect>`,
      );
      // Whole numbers above narrow bars, so neighbours' labels do not run together.
      const label = v >= 10 || barW < 24 ? String(Math.round(v)) : tickLabel(Number(v.toPrecision(2)));
      parts.push(`<text x="${(x + barW / 2 - 1).toFixed(1)}" y="${(y - 4).toFixed(1)}" text-anchor="middle" class="bar-label">${label}</text>`);
    });
  });
  return svg(o, f, 'bar', parts);
}
