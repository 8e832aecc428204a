// Child process of the corruption test: opens each model directory listed in argv[2] (a JSON file of
// paths) through the library's openTextModel (or the bare addon) and prints one JSON line per attempt, so a signal or a
// hang is pinned on the directory that caused it.
import { readFileSync } from 'node:fs';
import { openTextModel } from '../../dist/engine/text-model.js';
import { loadNative } from '../../dist/native/binding.js';

// argv[3] === 'native': the addon alone, no TypeScript validation in front (defence in depth).
const open = process.argv[3] === 'native' ? (dir, o) => loadNative().addon.loadModel(dir, o) : openTextModel;

const dirs = JSON.parse(readFileSync(process.argv[2], 'utf8'));
for (const [i, dir] of dirs.entries()) {
  process.stdout.write(`${JSON.stringify({ start: i })}\n`);
  try {
    const m = open(dir, { threads: 1, kvCacheBytes: 1 << 20 });
    process.stdout.write(`${JSON.stringify({ i, ok: true })}\n`);
    m.close();
  } catch (err) {
    const e = err instanceof Error ? err : new Error(String(err));
    process.stdout.write(`${JSON.stringify({ i, ok: false, name: e.name, message: e.message })}\n`);
  }
}
