// tokenizer.json post-processors: wrap the encoded sequence(s) with special tokens.

import {
  type ComponentConfig, fieldComponents, TokenizerConfigError, unsupported,
} from './tokenizer-json.js';

/** Returns the final ids for one sequence (b === null) or a pair. */
export type PostProcessor = (a: number[], b: number[] | null, addSpecialTokens: boolean) => number[];

/** Internal form: a list of sequences in, a list out (HF's process_encodings), concatenated at the end. */
type Step = (seqs: number[][], addSpecialTokens: boolean) => number[][];

type TemplatePiece = { special: number[] } | { sequence: 'A' | 'B' };

function parseTemplate(raw: unknown, specials: Map<string, number[]>, which: string): TemplatePiece[] {
  if (!Array.isArray(raw)) throw new TokenizerConfigError(`TemplateProcessing.${which} must be an array`);
  return raw.map((item: unknown): TemplatePiece => {
    const obj = item as { SpecialToken?: { id?: unknown }; Sequence?: { id?: unknown } };
    if (obj.SpecialToken !== undefined) {
      const name = obj.SpecialToken.id;
      const ids = typeof name === 'string' ? specials.get(name) : undefined;
      if (ids === undefined) throw new TokenizerConfigError(`TemplateProcessing special token ${JSON.stringify(name)} is not defined`);
      return { special: ids };
    }
    if (obj.Sequence !== undefined && (obj.Sequence.id === 'A' || obj.Sequence.id === 'B')) {
      return { sequence: obj.Sequence.id };
    }
    throw new TokenizerConfigError(`TemplateProcessing.${which} has an unknown item ${JSON.stringify(item)}`);
  });
}

function applyTemplate(template: TemplatePiece[], a: number[], b: number[] | null): number[] {
  const out: number[] = [];
  // Loops, not push(...ids): a long prompt would overflow the argument limit.
  const append = (ids: readonly number[]): void => {
    for (const id of ids) out.push(id);
  };
  for (const p of template) {
    if ('special' in p) append(p.special);
    else if (p.sequence === 'A') append(a);
    else if (b !== null) append(b);
  }
  return out;
}

function tokenPair(cfg: ComponentConfig, key: string): number {
  const v = cfg[key];
  if (Array.isArray(v) && v.length === 2 && typeof v[1] === 'number') return v[1];
  throw new TokenizerConfigError(`${cfg.type}.${key} must be [token, id]`);
}

function buildStep(cfg: ComponentConfig): Step {
  switch (cfg.type) {
    case 'TemplateProcessing': {
      const specials = new Map<string, number[]>();
      const rawSpecials = cfg['special_tokens'];
      if (typeof rawSpecials === 'object' && rawSpecials !== null) {
        for (const [name, v] of Object.entries(rawSpecials as Record<string, { ids?: unknown }>)) {
          if (!Array.isArray(v.ids) || !v.ids.every((x) => typeof x === 'number')) {
            throw new TokenizerConfigError(`TemplateProcessing special token ${JSON.stringify(name)} needs numeric ids`);
          }
          specials.set(name, v.ids as number[]);
        }
      }
      const single = parseTemplate(cfg['single'], specials, 'single');
      const pair = cfg['pair'] === undefined || cfg['pair'] === null ? null : parseTemplate(cfg['pair'], specials, 'pair');
      return (seqs, add) => {
        if (!add) return seqs;
        const [a = [], b] = seqs;
        if (b === undefined) return [applyTemplate(single, a, null)];
        if (pair === null) throw new TokenizerConfigError('TemplateProcessing has no pair template');
        return [applyTemplate(pair, a, b)];
      };
    }
    case 'BertProcessing': {
      const cls = tokenPair(cfg, 'cls');
      const sep = tokenPair(cfg, 'sep');
      return (seqs, add) => {
        if (!add) return seqs;
        const [a = [], b] = seqs;
        return [b === undefined ? [cls, ...a, sep] : [cls, ...a, sep, ...b, sep]];
      };
    }
    case 'RobertaProcessing': {
      const cls = tokenPair(cfg, 'cls');
      const sep = tokenPair(cfg, 'sep');
      return (seqs, add) => {
        if (!add) return seqs;
        const [a = [], b] = seqs;
        return [b === undefined ? [cls, ...a, sep] : [cls, ...a, sep, sep, ...b, sep]];
      };
    }
    case 'ByteLevel':
      // Only adjusts offsets, which rapid does not track.
      return (seqs) => seqs;
    case 'Sequence': {
      const steps = fieldComponents(cfg, 'processors').map(buildStep);
      return (seqs, add) => steps.reduce((acc, step) => step(acc, add), seqs);
    }
    default:
      throw unsupported('post_processor', cfg.type);
  }
}

export function buildPostProcessor(cfg: ComponentConfig): PostProcessor {
  const step = buildStep(cfg);
  return (a, b, add) => step(b === null ? [a] : [a, b], add).flat();
}
