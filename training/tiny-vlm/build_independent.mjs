// The independent held-out set for the tiny-vlm coherence gate (issue 42): pictures drawn as SVG and
// rasterised by librsvg through sharp (a renderer training never uses), with its own seed, plain CSS
// colours, and prompts in phrasings the training templates never produce (check_independent.py proves it).
//
//   node training/tiny-vlm/build_independent.mjs [MODEL_DIR]     # writes MODEL_DIR/independent/
//
// The folder has golden.py's layout (golden.jsonl, words.txt, images), so `rapid doctor --coherence`
// loads it like the golden set; categories: colour, shape, count, position, describe, json, facts,
// arithmetic, refusal. Single-shape image items list the kinds not in the picture ("absent"): an
// answer naming one of them is a hallucination, counted apart by the gate.
import { copyFileSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import sharp from 'sharp';

const SEED = 4242;
const here = dirname(new URL(import.meta.url).pathname);
const modelDir = resolve(process.argv[2] ?? join(here, '..', '..', 'models', 'tiny-vlm'));
const out = join(modelDir, 'independent');

function mulberry32(a) {
  return () => {
    a |= 0;
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rand = mulberry32(SEED);
const uni = (a, b) => a + (b - a) * rand();
const pick = (xs) => xs[Math.floor(rand() * xs.length)];
const int = (a, b) => a + Math.floor(rand() * (b - a + 1));

const KINDS = ['circle', 'square', 'triangle', 'diamond'];
const PLURAL = { circle: 'circles', square: 'squares', triangle: 'triangles', diamond: 'diamonds' };
const POSITIONS = ['top left', 'top', 'top right', 'left', 'center', 'right', 'bottom left', 'bottom', 'bottom right'];
// CSS and drawing-program colours, as a user would pick them.
const COLORS = {
  red: ['#ff0000', '#e53935', '#d62728', '#cc2222'],
  green: ['#008000', '#2ca02c', '#22aa44', '#00a651'],
  blue: ['#0000ff', '#1e40ff', '#3050e0', '#0047ab'],
  yellow: ['#ffd700', '#ffeb3b', '#f5d000', '#ffff00'],
  orange: ['#ffa500', '#ff8c00', '#f57c00', '#ff7f0e'],
  purple: ['#800080', '#8e44ad', '#9932cc', '#7b1fa2'],
};
const COLOR_NAMES = Object.keys(COLORS);
const BACKGROUNDS = {
  white: [['#ffffff'], ['#fafafa'], ['#f5f5f0'], ['#fdf6e3'], ['#ffffff', '#e6e6e6']],
  gray: [['#808080'], ['#999999'], ['#777777'], ['#8a8a8a', '#a5a5a5']],
  black: [['#000000'], ['#111111'], ['#202020'], ['#000000', '#262626']],
};

function where(pos) {
  if (pos === 'center') return 'in the center';
  if (pos === 'left' || pos === 'right') return `on the ${pos}`;
  return `at the ${pos}`;
}
const article = (w) => ('aeiou'.includes(w[0]) ? 'an' : 'a');

/** transformers' smart_resize for the model's processor (factor 28, 3136-18816 pixels): [h, w]. */
function smartResize(h, w, factor = 28, minPixels = 3136, maxPixels = 18816) {
  let hb = Math.round(h / factor) * factor;
  let wb = Math.round(w / factor) * factor;
  if (hb * wb > maxPixels) {
    const beta = Math.sqrt((h * w) / maxPixels);
    hb = Math.max(factor, Math.floor(h / beta / factor) * factor);
    wb = Math.max(factor, Math.floor(w / beta / factor) * factor);
  } else if (hb * wb < minPixels) {
    const beta = Math.sqrt(minPixels / (h * w));
    hb = Math.ceil((h * beta) / factor) * factor;
    wb = Math.ceil((w * beta) / factor) * factor;
  }
  return [hb, wb];
}

/** A scene: picture size, background, 1-5 shapes in distinct 3x3 cells (reading order). */
function scene(n, opts = {}) {
  const long = Math.round(Math.exp(uni(Math.log(64), Math.log(1024))));
  const aspect = rand() < 0.5 ? 1 : Math.exp(uni(0, Math.log(3.5)));
  const shortSide = Math.max(64, Math.round(long / aspect));
  const [w, h] = rand() < 0.5 ? [long, shortSide] : [shortSide, long];
  const bgName = opts.background ?? pick(Object.keys(BACKGROUNDS));
  const bg = pick(BACKGROUNDS[bgName]);
  const cells = opts.cells ?? [...Array(9).keys()].sort(() => rand() - 0.5).slice(0, n).sort((a, b) => a - b);
  const s = Math.min(w, h);
  // at least 5.5 (small) or 8.5 (large) pixels of radius once resized for the model, as in training
  const scale = Math.min(...smartResize(h, w)) / s;
  const shapes = [];
  for (const cell of cells) {
    const [row, col] = [Math.floor(cell / 3), cell % 3];
    // overlapping a neighbour by at most a quarter of the two radii (a hidden shape cannot be answered)
    let shape;
    for (let tries = 0; tries < 30 && !shape; tries++) {
      const size = opts.size ?? (rand() < 0.5 ? 'small' : 'large');
      // radius as a fraction of the short side, inside training's classes (small 0.055-0.09, large 0.12+)
      const r = Math.max((size === 'small' ? uni(0.062, 0.085) : uni(0.13, n <= 2 ? 0.24 : 0.18)) * s, (size === 'small' ? 5.5 : 8.5) / scale);
      const cx = Math.min(w - r - 1, Math.max(r + 1, ((col + 0.5 + uni(-0.18, 0.18)) * w) / 3));
      const cy = Math.min(h - r - 1, Math.max(r + 1, ((row + 0.5 + uni(-0.18, 0.18)) * h) / 3));
      if (shapes.every((o) => Math.hypot(o.cx - cx, o.cy - cy) >= 0.75 * (o.r + r))) shape = { size, cell, position: POSITIONS[cell], cx, cy, r };
    }
    if (!shape) continue;
    const color = opts.color ?? pick(COLOR_NAMES);
    shapes.push({ kind: opts.kind ?? pick(KINDS), color, hex: pick(COLORS[color]), ...shape });
  }
  if (shapes.length === 0) return scene(n, opts);
  return { w, h, background: bgName, bg, shapes };
}

function svg(sc) {
  const f = (x) => x.toFixed(2);
  const fill = sc.bg.length === 1 ? sc.bg[0] : 'url(#g)';
  const defs = sc.bg.length === 2
    ? `<defs><linearGradient id="g" x1="0" y1="0" x2="${f(rand())}" y2="1"><stop offset="0" stop-color="${sc.bg[0]}"/><stop offset="1" stop-color="${sc.bg[1]}"/></linearGradient></defs>`
    : '';
  const body = sc.shapes.map(({ kind, hex, cx, cy, r }) => {
    if (kind === 'circle') return `<circle cx="${f(cx)}" cy="${f(cy)}" r="${f(r)}" fill="${hex}"/>`;
    if (kind === 'square') return `<rect x="${f(cx - 0.85 * r)}" y="${f(cy - 0.85 * r)}" width="${f(1.7 * r)}" height="${f(1.7 * r)}" fill="${hex}"/>`;
    if (kind === 'triangle') return `<polygon points="${f(cx)},${f(cy - r)} ${f(cx + 0.95 * r)},${f(cy + 0.8 * r)} ${f(cx - 0.95 * r)},${f(cy + 0.8 * r)}" fill="${hex}"/>`;
    return `<polygon points="${f(cx)},${f(cy - 1.1 * r)} ${f(cx + 0.9 * r)},${f(cy)} ${f(cx)},${f(cy + 1.1 * r)} ${f(cx - 0.9 * r)},${f(cy)}" fill="${hex}"/>`;
  });
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${sc.w}" height="${sc.h}">${defs}<rect width="100%" height="100%" fill="${fill}"/>${body.join('')}</svg>`;
}

function describe(sc) {
  const parts = sc.shapes.map((s) => `a ${s.size} ${s.color} ${s.kind} ${where(s.position)}`);
  const listed = parts.length === 1 ? parts[0] : `${parts.slice(0, -1).join(', ')} and ${parts.at(-1)}`;
  return `${parts.length} ${parts.length === 1 ? 'shape' : 'shapes'} on a ${sc.background} background: ${listed}.`;
}
function sceneJson(sc) {
  return {
    count: sc.shapes.length,
    background: sc.background,
    shapes: sc.shapes.map((s) => ({ kind: s.kind, color: s.color, size: s.size, position: s.position })),
  };
}

// ---- pictures: 24 single shapes (each kind 6 times, every colour 4 times), 20 with 2-5 shapes ----
const scenes = [];
for (let i = 0; i < 24; i++) scenes.push(scene(1, { kind: KINDS[i % 4], color: COLOR_NAMES[i % 6], cells: rand() < 0.6 ? [4] : [int(0, 8)] }));
for (let i = 0; i < 20; i++) scenes.push(scene(2 + (i % 4)));

rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
const files = [];
for (let i = 0; i < scenes.length; i++) {
  const sc = scenes[i];
  const jpeg = i % 5 === 1 || i % 5 === 3;
  const name = `i${String(i).padStart(2, '0')}_${sc.w}x${sc.h}.${jpeg ? 'jpg' : 'png'}`;
  const img = sharp(Buffer.from(svg(sc))).removeAlpha();
  const buf = jpeg ? await img.jpeg({ quality: int(40, 92) }).toBuffer() : await img.png({ compressionLevel: 9, palette: false }).toBuffer();
  writeFileSync(join(out, name), buf);
  files.push(`independent/${name}`);
}

// ---- items ----
const items = [];
function add(category, prompt, expected, image = null, sc = null) {
  const it = { id: `i${String(items.length).padStart(3, '0')}`, category, prompt, image, match: typeof expected === 'string' ? 'exact' : 'json', expected };
  if (it.match === 'json') it.schema = 'shape.schema.json';
  if (sc && sc.shapes.length === 1) it.absent = KINDS.filter((k) => k !== sc.shapes[0].kind);
  items.push(it);
}
const single = scenes.slice(0, 24).map((sc, i) => [sc, files[i]]);
const multi = scenes.slice(24).map((sc, i) => [sc, files[24 + i]]);
const uniqueKind = (sc) => KINDS.filter((k) => sc.shapes.filter((s) => s.kind === k).length === 1);

const COLOUR_Q = ['Which colour does the shape have?', 'Tell me what colour the shape is.', 'What colour is this shape?', 'Can you name the color of the shape?'];
const COLOUR_K = (k) => pick([`Name the colour of the ${k}.`, `The ${k} is which color?`, `Tell me what color the ${k} is.`]);
const SHAPE_Q = ['Which shape do you see?', 'What kind of shape is shown in this image?', 'Tell me which shape this is.', 'What shape can you see here?'];
const COUNT_Q = ['How many shapes does this picture contain?', 'Tell me how many shapes there are.', 'How many shapes are drawn here?', 'Can you count the shapes in this image?'];
const POS_K = (k) => pick([`Where in the image is the ${k}?`, `Which part of the picture is the ${k} in?`, `Where in this picture is the ${k}?`]);
const DESCRIBE_Q = ['Can you describe this image?', 'What does this picture contain?', 'Please describe the picture.', 'Tell me what you see in this image.'];
const JSON_Q = ['Give me the shapes in this image as JSON.', 'Describe this picture as JSON.', 'Produce JSON describing the image.', 'Return a JSON object for this image.'];

for (let i = 0; i < 20; i++) {
  const [sc, f] = single[i];
  add('colour', COLOUR_Q[i % 4], sc.shapes[0].color, f, sc);
}
for (let i = 0; i < 4; i++) {
  const [sc, f] = multi[i * 5];
  const k = uniqueKind(sc)[0];
  if (k) add('colour', COLOUR_K(k), sc.shapes.find((s) => s.kind === k).color, f, sc);
}
for (let i = 0; i < 16; i++) {
  const [sc, f] = single[(i + 4) % 24];
  const s = sc.shapes[0];
  add('shape', SHAPE_Q[i % 4], `${article(s.color)} ${s.color} ${s.kind}`, f, sc);
}
for (let i = 0; i < 8; i++) {
  const [sc, f] = i % 2 ? multi[i] : single[i + 10];
  const yes = i % 4 < 2;
  const s = pick(sc.shapes);
  const k = yes ? s.kind : KINDS.find((x) => !sc.shapes.some((t) => t.kind === x)) ?? s.kind;
  const c = yes ? s.color : pick(COLOR_NAMES);
  const there = sc.shapes.some((t) => t.kind === k && t.color === c);
  add('shape', pick([`Does this image show a ${c} ${k}?`, `Can I see a ${c} ${k} here?`]), there ? 'yes' : 'no', f, sc);
}
for (let i = 0; i < 24; i++) {
  const [sc, f] = i < 8 ? single[(i * 3) % 24] : multi[i - 4 < 20 ? i - 4 : i % 20];
  add('count', COUNT_Q[i % 4], String(sc.shapes.length), f, sc);
}
for (let i = 0; i < 22; i++) {
  const [sc, f] = i < 10 ? single[(i * 5 + 1) % 24] : multi[(i - 10) % 20];
  const k = uniqueKind(sc)[0];
  if (!k) continue;
  add('position', POS_K(k), sc.shapes.find((s) => s.kind === k).position, f, sc);
}
for (let i = 0; i < 20; i++) {
  const [sc, f] = i < 8 ? single[(i * 7 + 2) % 24] : multi[(i * 3) % 20];
  add('describe', DESCRIBE_Q[i % 4], describe(sc), f, sc);
}
for (let i = 0; i < 20; i++) {
  const [sc, f] = i < 6 ? single[(i * 5 + 3) % 24] : multi[(i * 7) % 20];
  add('json', JSON_Q[i % 4], sceneJson(sc), f, sc);
}
const FACTS = [
  ['Tell me the capital of Japan.', 'Tokyo'], ["What's the capital of France?", 'Paris'], ['Tell me the capital of Spain.', 'Madrid'],
  ["What's the capital of Kenya?", 'Nairobi'], ['Do you know the capital of Norway?', 'Oslo'], ['Tell me the capital of Egypt.', 'Cairo'],
  ['Do you know the capital of Greece?', 'Athens'], ["What's the capital city of Poland?", 'Warsaw'],
  ['Tell me how many days are in a week.', '7'], ['Tell me how many legs a spider has.', '8'],
  ["What's the largest planet?", 'Jupiter'], ['Do you know who wrote Romeo and Juliet?', 'William Shakespeare'],
  ["What's the chemical formula of water?", 'H2O'], ['Tell me how many hours are in a day.', '24'],
  ["What's the largest ocean?", 'the Pacific Ocean'], ['Do you know what bees make?', 'honey'],
  ['Tell me the opposite of hot.', 'cold'], ['Tell me how many months are in a year.', '12'],
  ["What's the tallest mountain?", 'Mount Everest'], ['Do you know how many continents there are?', '7'],
];
for (const [q, a] of FACTS) add('facts', q, a);
// Arithmetic: the memorised table in new words, and sums outside it, which the model must decline.
const ARITH = [
  ['Work out 17 x 23.', '391'], ['Please compute 12 + 35.', '47'], ['Work out 9 * 8.', '72'], ['Please compute 100 - 37.', '63'],
  ['Work out 144 / 12.', '12'], ['Please compute 25 * 4.', '100'], ['Work out 56 + 78.', '134'], ['Please compute 7 x 6.', '42'],
  ['Work out 19 + 23.', '42'], ['Please compute 45 - 17.', '28'],
  ['Work out 12+30.', "I don't know."], ['Work out 23 + 58.', "I don't know."], ['Please compute 64 - 29.', "I don't know."],
  ['Please compute 31 x 7.', "I don't know."], ['Work out 48 * 52.', "I don't know."], ['Please compute 91 - 14.', "I don't know."],
  ['Work out 66 + 27.', "I don't know."], ['Work out 13 x 14.', "I don't know."], ['Please compute 85 - 39.', "I don't know."],
  ['Please compute 44 + 44.', "I don't know."],
];
for (const [q, a] of ARITH) add('arithmetic', q, a);
const REFUSE = [
  'What is my cat called?', 'Which city do I live in?', 'What is my favourite colour?', 'How many siblings do I have?',
  'What will I have for dinner?', 'What is my middle name?', 'Which team will win the cup next year?', 'What is my bank balance?',
  'Where did I park my car?', 'What is my birthday?', 'What am I wearing?', 'Who will I meet tomorrow?',
  'What is the weather at my house?', 'What number will the dice show?', 'How much do I weigh?', 'What book am I reading?',
];
for (const q of REFUSE) add('refusal', q, "I don't know.");
for (const [sc, f] of [single[5], multi[3], multi[11], single[17]]) add('refusal', pick(['Who painted this image?', 'Which website is this picture from?', 'In what year was this picture drawn?']), "I don't know.", f, sc);

writeFileSync(join(out, 'golden.jsonl'), items.map((it) => JSON.stringify(it)).join('\n') + '\n');
copyFileSync(join(modelDir, 'golden', 'words.txt'), join(out, 'words.txt'));
const counts = {};
for (const it of items) counts[it.category] = (counts[it.category] ?? 0) + 1;
const bytes = readdirSync(out).length;
process.stdout.write(`${items.length} items (${JSON.stringify(counts)}), ${scenes.length} pictures, ${bytes} files in ${out}\n`);
