// --device on run, serve and bench: auto|cpu|cuda accepted, anything else is refused while the
// command line is parsed (before a model or the native addon loads) with a message naming the flag.
import { Command, CommanderError, InvalidArgumentError } from 'commander';
import { describe, expect, it } from 'vitest';
import { registerBench } from '../../src/cli/commands/bench.js';
import { registerRun } from '../../src/cli/commands/run.js';
import { registerServe } from '../../src/cli/commands/serve.js';
import { parseDeviceOption } from '../../src/cli/options.js';

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
    expect(() => parseDeviceOption('gpu')).toThrow('--device must be auto, cpu or cuda, got "gpu"');
  });

  for (const cmd of ['run', 'serve', 'bench']) {
    it(`rapid ${cmd} --device gpu fails while parsing, naming the accepted values`, async () => {
      const { error, stderr } = await parse([cmd, 'some-model', '--device', 'gpu']);
      expect(error).toBeInstanceOf(CommanderError);
      expect((error as CommanderError).code).toBe('commander.invalidArgument');
      expect(stderr).toMatch(/option '--device <device>' argument 'gpu' is invalid\. --device must be auto, cpu or cuda, got "gpu"/);
    });
  }
});
