// `rapid models`: list the catalog and the cache; `pull`, `rm`, `info` and user `alias`es.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Command } from 'commander';
import { unsupportedArchitecture } from '../../models/architectures.js';
import { formatBytes } from '../../models/format-bytes.js';
import { listModels, type ListedModel } from '../../models/list-models.js';
import { modelInfo, type ModelInfo } from '../../models/model-info.js';
import { createProgressPrinter } from '../../models/progress-printer.js';
import type { PullEvent } from '../../models/pull.js';
import { startWait, withWait } from '../wait-spinner.js';
import { exportModel } from '../../models/export-model.js';
import { importModel } from '../../models/import-model.js';
import { resolveModelDetailed } from '../../models/resolve-model.js';
import { removeModel } from '../../models/remove-model.js';
import { resolveSpec } from '../../models/resolve-spec.js';
import { readUserAliases, userAliasesPath, writeUserAliases } from '../../models/user-aliases.js';
import { findAlias } from '../../models/catalog.js';
import { ModelError } from '../../models/errors.js';

function table(rows: string[][]): string {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  return rows.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]))).join('  ')).join('\n');
}

function downloadedCell(m: ListedModel): string {
  const d = m.downloaded;
  if (m.embedded) return 'embedded (default)';
  if (!d) return '-';
  if (!d.complete) return `partial ${formatBytes(d.sizeBytes)}${d.incompleteBytes ? ' (interrupted; pull resumes)' : ''}`;
  return `yes ${formatBytes(d.sizeBytes)}`;
}

function printList(all: boolean): void {
  const listing = listModels({ all });
  const rows = [['ALIAS', 'PARAMS', 'INPUT', 'QUANT', 'SIZE', 'STATUS', 'DOWNLOADED']];
  for (const m of listing.catalog) {
    rows.push([
      m.alias ?? m.repo,
      m.params ?? '',
      (m.modalities ?? ['text']).join('+'),
      (m.quantization ?? '').replace(/ \(.*\)$/, ''),
      m.sizeBytes ? `~${formatBytes(m.sizeBytes)}` : '',
      m.status ?? '',
      downloadedCell(m),
    ]);
  }
  process.stdout.write(`${table(rows)}\n`);
  if (listing.other.length) {
    process.stdout.write('\nAlso in the cache (not in the catalog; run them by repo name):\n');
    const other = [['REPO', 'DOWNLOADED']];
    for (const m of listing.other) other.push([m.repo, downloadedCell(m)]);
    process.stdout.write(`${table(other)}\n`);
  }
  const user = readUserAliases();
  if (Object.keys(user).length) {
    process.stdout.write(`\nYour aliases (${userAliasesPath()}):\n`);
    process.stdout.write(`${table(Object.entries(user).map(([k, v]) => [`  ${k}`, v]))}\n`);
  }
  process.stdout.write(
    `\nCache: ${listing.cacheDir}\n` +
      'planned models can be pulled but not run yet; `rapid models info ALIAS` says why. `--all` also lists retired aliases.\n',
  );
}

function printInfo(i: ModelInfo): void {
  const lines: [string, string | undefined][] = [
    ['model', i.alias ? `${i.alias} (${i.repo})` : (i.repo ?? i.spec)],
    ['status', i.status ? `${i.status}${i.reason ? `: ${i.reason}` : ''}${i.replacement && i.status !== 'supported' ? `; use ${i.replacement}` : ''}` : undefined],
    ['description', i.description],
    ['location', i.dir ?? (i.source === 'hub' ? 'not downloaded (details from the hub)' : 'not downloaded (details from the catalog)')],
    ['architecture', i.architecture ? `${i.architecture}${i.modelType ? ` (${i.modelType})` : ''}` : undefined],
    ['parameters', i.params !== undefined ? `${i.paramsLabel} (${i.params.toLocaleString('en-US')})` : i.paramsLabel],
    ['quantization', i.quantization],
    ['dtype', i.dtype],
    ['context', i.contextLength?.toLocaleString('en-US')],
    [
      'shape',
      i.hiddenSize !== undefined
        ? `hidden ${i.hiddenSize}, ${i.layers} layers, ${i.attentionHeads}/${i.kvHeads} heads, vocab ${i.vocabSize}${i.tiedEmbeddings ? ', tied embeddings' : ''}`
        : undefined,
    ],
    ['input', i.modalities.join(' + ') || undefined],
    [
      'sampling',
      i.sampling
        ? Object.entries(i.sampling)
            .map(([k, v]) => `${k} ${v}`)
            .join(', ')
        : undefined,
    ],
    ['note', i.note],
    ['size', i.sizeBytes ? `${i.files.length ? '' : '~'}${formatBytes(i.sizeBytes)}` : undefined],
  ];
  const w = Math.max(...lines.map(([k]) => k.length));
  for (const [k, v] of lines) if (v !== undefined && v !== '') process.stdout.write(`${k.padEnd(w)}  ${v}\n`);
  if (i.files.length) {
    process.stdout.write('files\n');
    for (const f of i.files) process.stdout.write(`  ${f.name.padEnd(40)} ${formatBytes(f.sizeBytes).padStart(9)}\n`);
  }
}

export function registerModels(program: Command): void {
  const models = program
    .command('models')
    .description('List, download, inspect and remove models (Hugging Face cache, shared with other tools)')
    .option('--json', 'print the listing as JSON')
    .option('--all', 'include retired aliases')
    .addHelpText(
      'after',
      `
Models are named by alias (\`rapid models\`), org/name[@revision] on the Hugging Face hub, or a local
directory. Environment:
  HF_HOME, HF_HUB_CACHE   where downloads go (default ~/.cache/huggingface/hub, shared with other tools)
  HF_ENDPOINT             hub URL (a mirror)
  HF_TOKEN                access token for private or gated repos (else $HF_HOME/token)
  HF_HUB_OFFLINE=1        never touch the network; only cached models resolve
  HTTPS_PROXY, HTTP_PROXY downloads go through this proxy (NO_PROXY: hosts that bypass it)
  RAPID_CONFIG_DIR        where aliases.json lives (default $XDG_CONFIG_HOME/rapid)`,
    )
    .action((opts: { json?: boolean; all?: boolean }) => {
      if (opts.json) process.stdout.write(`${JSON.stringify(listModels({ all: opts.all }), null, 2)}\n`);
      else printList(opts.all ?? false);
    });

  models
    .command('pull')
    .description('Download a model (alias, org/name[@revision]) into the Hugging Face cache; resumes interrupted downloads')
    .argument('<model>', 'alias or org/name[@revision]')
    .option('-r, --revision <rev>', 'branch, tag or commit (default: main)')
    .option('--json', 'print the result as JSON on stdout')
    .option('-q, --quiet', 'no progress output')
    .action(async (spec: string, opts: { revision?: string; json?: boolean; quiet?: boolean }) => {
      const full = opts.revision ? `${spec.split('@')[0]}@${opts.revision}` : spec;
      const ref = resolveSpec(full);
      if (ref.kind === 'local') throw new ModelError(`${spec} is a local directory; nothing to pull`);
      const printer = opts.quiet ? undefined : createProgressPrinter(process.stderr);
      // Until the hub answers (or the cache does) a spinner shows on a terminal that something runs.
      const asking = opts.quiet ? undefined : startWait(`looking up ${ref.repo}`);
      const progress =
        printer &&
        ((e: PullEvent) => {
          asking?.succeed();
          printer(e);
        });
      // Bytes already written stay in <blob>.incomplete: say so instead of dying silently.
      const onSigint = () => {
        process.stderr.write(`\ninterrupted: what was downloaded stays in the cache; \`rapid models pull ${spec}\` resumes it\n`);
        process.exit(130);
      };
      process.once('SIGINT', onSigint);
      let r;
      try {
        r = await resolveModelDetailed(full, { pull: true, allowPlanned: true, onProgress: progress, env: process.env });
      } finally {
        asking?.succeed();
        process.off('SIGINT', onSigint);
      }
      // A model already complete in the cache skips the hub: `pull` means "make it available".
      if (r.source === 'cache' && !opts.quiet && !opts.json) process.stderr.write(`${ref.repo} is already downloaded: ${r.dir}\n`);
      if (!opts.json) {
        if (r.entry?.status === 'planned') process.stderr.write(`note: ${r.entry.alias} is planned: rapid cannot run it yet (${r.entry.reason}).\n`);
        else {
          const why = unsupportedArchitecture(JSON.parse(readFileSync(join(r.dir, 'config.json'), 'utf8')) as Record<string, unknown>);
          if (why) process.stderr.write(`note: rapid cannot run this model yet: ${why}.\n`);
        }
      }
      if (opts.json) process.stdout.write(`${JSON.stringify({ repo: ref.repo, revision: ref.revision, dir: r.dir, source: r.source })}\n`);
      else process.stdout.write(`${r.dir}\n`);
    });

  models
    .command('export')
    .description('Write a downloaded model into one tar file (with every file\'s sha256) to carry to a machine without network')
    .argument('<model>', 'alias or org/name[@revision] in the download cache')
    .argument('<file>', 'the archive to write, e.g. model.tar')
    .action(async (spec: string, file: string) => {
      const r = await withWait(`exporting ${spec}`, () => exportModel(spec, file));
      process.stdout.write(`exported ${r.repo} (commit ${r.commit.slice(0, 12)}, ${r.files} files, ${formatBytes(r.bytes)}) to ${r.file}\n`);
    });

  models
    .command('import')
    .description('Install a model from a `rapid models export` archive into the download cache, checking every file\'s sha256')
    .argument('<file>', 'the archive, e.g. model.tar')
    .action(async (file: string) => {
      const r = await withWait(`importing ${file}`, () => importModel(file));
      process.stdout.write(`imported ${r.repo} (commit ${r.commit.slice(0, 12)}, ${r.files} files, ${formatBytes(r.bytes)}) into ${r.dir}\n`);
    });

  models
    .command('rm')
    .alias('remove')
    .description('Delete downloaded models from the Hugging Face cache (all revisions; other HF tools lose them too)')
    .argument('<model...>', 'aliases or org/name repos')
    .option('--dry-run', 'only say what would be deleted')
    .option('--json', 'print the result as JSON')
    .action((specs: string[], opts: { dryRun?: boolean; json?: boolean }) => {
      const removed = specs.map((s) => removeModel(s, { dryRun: opts.dryRun }));
      if (opts.json) process.stdout.write(`${JSON.stringify(removed)}\n`);
      else for (const r of removed) process.stdout.write(`${opts.dryRun ? 'would remove' : 'removed'} ${r.repo} (${formatBytes(r.freedBytes)}) from ${r.dir}\n`);
    });

  models
    .command('info')
    .description('Architecture, parameters, quantization, context, inputs and files of a model')
    .argument('<model>', 'alias, org/name[@revision] or a directory')
    .option('--json', 'print as JSON')
    .option('--no-remote', 'do not ask the hub about a model that is not downloaded')
    .action(async (spec: string, opts: { json?: boolean; remote: boolean }) => {
      const info = await modelInfo(spec, { remote: opts.remote });
      if (opts.json) process.stdout.write(`${JSON.stringify(info, null, 2)}\n`);
      else printInfo(info);
    });

  models
    .command('alias')
    .description('Show or set your own aliases (stored in the rapid config dir)')
    .argument('[name]', 'alias to show or set')
    .argument('[target]', 'org/name[@revision], a built-in alias, or a directory')
    .option('--remove', 'delete the alias NAME')
    .action((name: string | undefined, target: string | undefined, opts: { remove?: boolean }) => {
      const aliases = readUserAliases();
      if (!name) {
        for (const [k, v] of Object.entries(aliases)) process.stdout.write(`${k}\t${v}\n`);
        return;
      }
      if (opts.remove) {
        if (!(name in aliases)) throw new ModelError(`no user alias "${name}" in ${userAliasesPath()}`);
        delete aliases[name];
        writeUserAliases(aliases);
        process.stdout.write(`removed ${name}\n`);
        return;
      }
      if (!target) {
        if (!(name in aliases)) throw new ModelError(`no user alias "${name}" in ${userAliasesPath()}`);
        process.stdout.write(`${aliases[name]}\n`);
        return;
      }
      if (name.includes('/') || name.includes('@')) throw new ModelError(`an alias name cannot contain "/" or "@": ${name}`);
      if (findAlias(name)) process.stderr.write(`note: ${name} shadows the built-in alias of the same name\n`);
      resolveSpec(target); // refuse targets that resolve to nothing (or to a retired alias)
      aliases[name] = target;
      process.stdout.write(`${name} -> ${target} (${writeUserAliases(aliases)})\n`);
    });
}
