// The native loader: candidate order and the reason given for each rejected binary.
import { mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { loadNativeFrom, nativeCandidates } from '../../src/native/binding.js';

const tuple = `${process.platform}-${process.arch}`;
let root = '';

function fakeRoot(): string {
  root = mkdtempSync(join(tmpdir(), 'rapid-binding-'));
  return root;
}

afterEach(() => rmSync(root, { recursive: true, force: true }));

describe('native loader', () => {
  it('rejects prebuilds for another platform, another Node ABI or runtime, with reasons', () => {
    const r = fakeRoot();
    mkdirSync(join(r, 'prebuilds', 'win32-arm64'), { recursive: true });
    writeFileSync(join(r, 'prebuilds', 'win32-arm64', 'rapid.napi.node'), '');
    mkdirSync(join(r, 'prebuilds', tuple), { recursive: true });
    writeFileSync(join(r, 'prebuilds', tuple, 'rapid.abi1.node'), '');
    writeFileSync(join(r, 'prebuilds', tuple, 'rapid.electron.napi.node'), '');
    writeFileSync(join(r, 'prebuilds', tuple, 'rapid-vlm.glibc.node'), '');
    const { candidates, rejected } = nativeCandidates(r);
    expect(candidates.map((c) => c.source)).toEqual(['prebuild']);
    expect(rejected.find((x) => x.path.includes('win32-arm64'))?.reason).toMatch(`built for win32-arm64, this machine is ${tuple}`);
    expect(rejected.find((x) => x.path.includes('abi1.'))?.reason).toMatch(`built for Node ABI 1, this Node has ABI ${process.versions.modules}`);
    expect(rejected.find((x) => x.path.includes('electron'))?.reason).toMatch(/built for electron/);
  });

  it('prefers a prebuild, but a newer local build wins and the prebuild is reported as older', () => {
    const r = fakeRoot();
    mkdirSync(join(r, 'prebuilds', tuple), { recursive: true });
    const pre = join(r, 'prebuilds', tuple, 'rapid.napi.node');
    writeFileSync(pre, '');
    mkdirSync(join(r, 'build', 'Release'), { recursive: true });
    const local = join(r, 'build', 'Release', 'rapid_native.node');
    writeFileSync(local, '');
    utimesSync(local, new Date(1000), new Date(1000));
    expect(nativeCandidates(r).candidates.map((c) => c.source)).toEqual(['prebuild', 'build']);
    utimesSync(pre, new Date(1000), new Date(1000));
    utimesSync(local, new Date(), new Date());
    const { candidates, rejected } = nativeCandidates(r);
    expect(candidates.map((c) => c.source)).toEqual(['build']);
    expect(rejected[0].reason).toMatch(/older than the local build/);
  });

  it('fails with every reason when no candidate loads', () => {
    const r = fakeRoot();
    mkdirSync(join(r, 'prebuilds', tuple), { recursive: true });
    writeFileSync(join(r, 'prebuilds', tuple, 'rapid.napi.node'), 'not an ELF file');
    expect(() => loadNativeFrom(r)).toThrow(/failed to load[\s\S]*npm run build:native/);
  });
});
