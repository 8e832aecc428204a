// Where a worker thread's compiled script is: next to its pool's module in dist/, or under dist/ at the
// same place when the pool runs from src/ (vitest). Workers always run compiled JavaScript.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/**
 * `moduleUrl`: the pool's import.meta.url; `srcPath`: the worker's path under src/ (e.g.
 * "vision/preprocess-worker.js"); `what`: the worker's name for the error when it was never compiled.
 */
export function compiledWorker(moduleUrl: string, srcPath: string, what: string): URL {
  const sibling = new URL(`./${srcPath.split('/').at(-1)}`, moduleUrl);
  if (existsSync(fileURLToPath(sibling))) return sibling;
  const compiled = new URL(`dist/${srcPath}`, new URL('../', import.meta.url));
  if (moduleUrl.endsWith('.ts') && existsSync(fileURLToPath(compiled))) return compiled;
  throw new Error(`the ${what} ${fileURLToPath(sibling)} is missing; run \`npm run compile\``);
}
