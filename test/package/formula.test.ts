// Formula/rapid.rb: Homebrew structure, and Ruby syntax where a Ruby is installed.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const formulaPath = join(resolve(import.meta.dirname, '..', '..'), 'Formula', 'rapid.rb');
const formula = readFileSync(formulaPath, 'utf8');
const pkg = JSON.parse(readFileSync(join(resolve(import.meta.dirname, '..', '..'), 'package.json'), 'utf8')) as {
  name: string;
  version: string;
};
const hasRuby = spawnSync('ruby', ['--version']).status === 0;

describe('Homebrew formula', () => {
  it('installs the npm tarball of this version with Node as a dependency', () => {
    expect(formula).toMatch(/^class Rapid < Formula$/m);
    expect(formula).toContain(`url "https://registry.npmjs.org/${pkg.name}/-/${pkg.name}-${pkg.version}.tgz"`);
    expect(formula).toMatch(/^\s+depends_on "node"$/m);
    expect(formula).toMatch(/std_npm_args/);
    expect(formula).toMatch(/^\s+test do$/m);
    for (const field of ['desc', 'homepage', 'sha256', 'license']) expect(formula).toMatch(new RegExp(`^\\s+${field} "`, 'm'));
  });

  it.skipIf(!hasRuby)('parses with ruby -c', () => {
    const r = spawnSync('ruby', ['-c', formulaPath], { encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/Syntax OK/);
  });
});
