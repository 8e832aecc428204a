// Copies the non-TypeScript assets that dist/ needs next to the compiled modules.
import { copyFileSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
for (const rel of ['models/catalog.json']) {
  const dst = join(root, 'dist', rel);
  mkdirSync(dirname(dst), { recursive: true });
  copyFileSync(join(root, 'src', rel), dst);
}
