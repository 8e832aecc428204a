// --device on run, serve and bench: auto|cpu|cuda accepted, anything else is refused while the
// command line is parsed (before a model or the native addon loads) with a message naming the flag.
import { Command, CommanderError, InvalidArgumentError } from 'commander';
import { describe, expect, it } from 'vitest';
import { registerBench } from '../../src/cli/commands/bench.js';
import { registerRun } from '../../src/cli/commands/run.js';
import { registerServe } from '../../src/cli/commands/serve.js';
import { parseDeviceOption, useDevice } from '../../src/cli/options.js';
import { splitDeviceFlag, visibleDeviceFor } from '../../src/native/device-index.js';

async function parse(args: string[]): Promise<{ error: unknown; stderr: string }> {
  let stderr = '';
  const program = new Command('rapid').exitOverride().configureOutput({ writeErr: (s) => (stderr += s), writeOut: () => undefined });
  registerRun(program);
  registerServe(program);
  registerBench(program);
  try {
    await program.parseAsync(['node', 'rapid', ...args]);
    return { error: undefined, stderr };
  } catch (error) {
    return { error, stderr };
  }
}

describe('--device', () => {
  it('accepts auto, cpu and cuda (any case) and refuses anything else', () => {
    expect(['auto', 'cpu', 'cuda', 'CUDA'].map(parseDeviceOption)).toEqual(['auto', 'cpu', 'cuda', 'cuda']);
    expect(() => parseDeviceOption('gpu')).toThrow(InvalidArgumentError);
    expect(() => parseDeviceOption('gpu')).toThrow('--device must be auto, cpu, cuda or cuda:N, got "gpu"');
  });

  it('accepts cuda:N and narrows the visible GPUs to the N-th, counting what is visible', () => {
    expect(['cuda:0', 'CUDA:3', ' cuda:12 '].map(parseDeviceOption)).toEqual(['cuda:0', 'cuda:3', 'cuda:12']);
    expect(() => parseDeviceOption('cuda:x')).toThrow(InvalidArgumentError);
    expect(() => parseDeviceOption('cuda:-1')).toThrow(InvalidArgumentError);
    expect(splitDeviceFlag('cuda:2')).toEqual({ kind: 'cuda', index: 2 });
    expect(splitDeviceFlag('cpu')).toEqual({ kind: 'cpu', index: null });
    const env: NodeJS.ProcessEnv = {};
    expect(useDevice('cuda:1', env)).toBe('cuda');
    expect(env.CUDA_VISIBLE_DEVICES).toBe('1');
    const narrowed: NodeJS.ProcessEnv = { CUDA_VISIBLE_DEVICES: '4,6,7' };
    expect(useDevice('cuda:2', narrowed)).toBe('cuda');
    expect(narrowed.CUDA_VISIBLE_DEVICES).toBe('7');
    expect(() => visibleDeviceFor(3, { CUDA_VISIBLE_DEVICES: '4,6,7' })).toThrow(/cuda:3: only 3 GPUs are visible \(CUDA_VISIBLE_DEVICES=4,6,7\)/);
    const untouched: NodeJS.ProcessEnv = {};
    expect(useDevice('cpu', untouched)).toBe('cpu');
    expect(untouched).toEqual({});
  });

  for (const cmd of ['run', 'serve', 'bench']) {
    it(`rapid ${cmd} --device gpu fails while parsing, naming the accepted values`, async () => {
      const { error, stderr } = await parse([cmd, 'some-model', '--device', 'gpu']);
      expect(error).toBeInstanceOf(CommanderError);
      expect((error as CommanderError).code).toBe('commander.invalidArgument');
      expect(stderr).toMatch(/option '--device <device>' argument 'gpu' is invalid\. --device must be auto, cpu, cuda or cuda:N, got "gpu"/);
    });
  }
});
