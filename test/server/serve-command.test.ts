// `rapid serve` flags: sizes, integers, and the model directory check, without starting a model.
import { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { parseByteSize, registerServe, startServer } from '../../src/cli/commands/serve.js';

describe('rapid serve', () => {
  it('parses byte sizes', () => {
    expect(parseByteSize('2GiB')).toBe(2 * 1024 ** 3);
    expect(parseByteSize('512m')).toBe(512 * 1024 ** 2);
    expect(parseByteSize('1.5G')).toBe(1.5 * 1024 ** 3);
    expect(parseByteSize('1000')).toBe(1000);
    expect(parseByteSize('2GB')).toBe(2e9);
    expect(() => parseByteSize('lots')).toThrow(/expected a size/);
    expect(() => parseByteSize('0')).toThrow(/positive/);
  });

  it('registers the command with its flags and rejects bad values', async () => {
    const program = new Command('rapid').exitOverride().configureOutput({ writeErr: () => undefined, writeOut: () => undefined });
    registerServe(program);
    const serve = program.commands.find((c) => c.name() === 'serve')!;
    const flags = serve.options.map((o) => o.long);
    for (const f of ['--host', '--port', '--api-key', '--max-num-seqs', '--max-batched-tokens', '--kv-cache-memory', '--max-waiting', '--step-timeout', '--no-prefix-cache', '--headers-timeout', '--body-timeout', '--body-idle-timeout', '--keep-alive-timeout', '--send-stall-timeout', '--max-connections', '--cors-origin', '--no-require-json-content-type', '--log-format', '--no-access-log', '--drain-delay', '--data-parallel']) {
      expect(flags).toContain(f);
    }
    await expect(program.parseAsync(['node', 'rapid', 'serve', 'x', '--port', 'abc'])).rejects.toThrow(/--port expects an integer/);
    await expect(program.parseAsync(['node', 'rapid', 'serve', 'x', '--kv-cache-memory', 'huge'])).rejects.toThrow(/expected a size/);
    await expect(program.parseAsync(['node', 'rapid', 'serve', 'x', '--headers-timeout', '0'])).rejects.toThrow(/--headers-timeout expects a positive number of seconds/);
    await expect(program.parseAsync(['node', 'rapid', 'serve', 'x', '--max-connections', '0'])).rejects.toThrow(/--max-connections must be at least 1/);
    await expect(program.parseAsync(['node', 'rapid', 'serve', 'x', '--log-format', 'xml'])).rejects.toThrow(/expected text or json, got "xml"/);
    await expect(program.parseAsync(['node', 'rapid', 'serve', 'x', '--drain-delay', '-1'])).rejects.toThrow(/--drain-delay expects a number of seconds \(0 or more\)/);
    await expect(program.parseAsync(['node', 'rapid', 'serve', 'x', '--data-parallel', '0'])).rejects.toThrow(/--data-parallel must be at least 1/);
  });

  it('says what is wrong with a bad model directory', async () => {
    await expect(startServer('/nonexistent/model', { port: 0 })).rejects.toThrow(/model directory not found/);
  });
});
