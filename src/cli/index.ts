// rapid's command line: one file per subcommand under ./commands, wired here.
import { Command } from 'commander';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../native/binding.js';
import { registerRun } from './commands/run.js';
import { registerServe } from './commands/serve.js';
import { registerChat } from './commands/chat.js';
import { registerConvert } from './commands/convert.js';
import { registerModels } from './commands/models.js';
import { registerDoctor } from './commands/doctor.js';
import { registerBench } from './commands/bench.js';

function packageVersion(): string {
  const pkg = JSON.parse(readFileSync(join(packageRoot(), 'package.json'), 'utf8')) as { version: string };
  return pkg.version;
}

export function buildProgram(): Command {
  const program = new Command('rapid')
    .description('Run vision-language and text LLMs locally.')
    .version(packageVersion(), '-v, --version')
    .showHelpAfterError()
    .configureHelp({ sortSubcommands: false });
  registerServe(program);
  registerRun(program);
  registerChat(program);
  registerConvert(program);
  registerModels(program);
  registerDoctor(program);
  registerBench(program, packageVersion());
  return program;
}

export async function main(argv: string[]): Promise<void> {
  await buildProgram().parseAsync(argv);
}
