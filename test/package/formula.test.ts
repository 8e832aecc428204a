// Formula/rapid.rb: Homebrew structure, that scripts/formula.mjs writes the url and sha256 of a freshly
// packed tarball, that the committed formula is that script's output (not hand-edited, no placeholder
// sha), and Ruby syntax where a Ruby is installed.
import { createHash } from 'node:crypto';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const root = resolve(import.meta.dirname, '..', '..');
const formulaPath = join(root, 'Formula', 'rapid.rb');
const formula = readFileSync(formulaPath, 'utf8');
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { name: string; version: string };
const hasRuby = spawnSync('ruby', ['--version']).status === 0;
const registryUrl = `https://registry.npmjs.org/${pkg.name}/-/${pkg.name}-${pkg.version}.tgz`;

/** Every field and block Homebrew needs to install the npm tarball on Node; returns the formula's sha256. */
function expectFormulaShape(text: string): string {
  expect(text).toMatch(/^class Rapid < Formula$/m);
  for (const field of ['desc', 'homepage', 'license']) expect(text).toMatch(new RegExp(`^ {2}${field} "[^"]+"$`, 'm'));
  const desc = /^ {2}desc "([^"]+)"$/m.exec(text)![1];
  expect(desc.length, 'brew audit: desc at most 80 characters').toBeLessThanOrEqual(80);
  expect(desc).not.toMatch(/^(A|An|The) |rapid/i);
  expect(text).toMatch(/^ {2}homepage "https:\/\/[^"]+"$/m);
  expect(text).toContain(`  url "${registryUrl}"`);
  const sha = /^ {2}sha256 "([0-9a-f]{64})"$/m.exec(text)?.[1];
  expect(sha, 'sha256 is 64 hex digits').toBeDefined();
  expect(sha).not.toMatch(/^0+$/);
  expect(text).toMatch(/^ {2}depends_on "node"$/m);
  expect(text).toMatch(/^ {2}def install\n {4}system "npm", "install", \*std_npm_args\n/m);
  expect(text).toMatch(/^ {2}test do\n.*rapid --help.*\n {2}end$/m);
  return sha!;
}

describe('Homebrew formula', () => {
  const work = mkdtempSync(join(tmpdir(), 'rapid-formula-'));
  let tarball = '';
  let written = '';
  beforeAll(() => {
    // Scripts off: the formula hashes whatever bytes were packed; compiling first adds nothing here.
    const out = execFileSync('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', work], { cwd: root, encoding: 'utf8' });
    tarball = join(work, (JSON.parse(out) as { filename: string }[])[0].filename);
    written = join(work, 'rapid.rb');
    execFileSync(process.execPath, [join(root, 'scripts', 'formula.mjs'), tarball, '--out', written], { encoding: 'utf8' });
  }, 300_000);
  afterAll(() => rmSync(work, { recursive: true, force: true }));

  it('the release script writes the packed tarball\'s registry url and sha256', () => {
    const text = readFileSync(written, 'utf8');
    const sha = expectFormulaShape(text);
    expect(sha).toBe(createHash('sha256').update(readFileSync(tarball)).digest('hex'));
  });

  it('the committed formula is the script\'s output for this version, with a real sha256', () => {
    const sha = expectFormulaShape(formula);
    const generated = readFileSync(written, 'utf8').replace(/^( {2}sha256 ")[0-9a-f]{64}"$/m, `$1${sha}"`);
    expect(formula).toBe(generated);
  });

  it.skipIf(!hasRuby)('parses with ruby -c', () => {
    for (const f of [formulaPath, written]) {
      const r = spawnSync('ruby', ['-c', f], { encoding: 'utf8' });
      expect(r.status, r.stderr).toBe(0);
      expect(r.stdout).toMatch(/Syntax OK/);
    }
  });
});
