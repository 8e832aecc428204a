// Shapes of a Hugging Face tokenizer.json and checked accessors for its loosely typed components.

/** Any pipeline component: `{"type": "...", ...fields}`. */
export interface ComponentConfig {
  type: string;
  [field: string]: unknown;
}

export interface AddedTokenConfig {
  id: number;
  content: string;
  single_word?: boolean;
  lstrip?: boolean;
  rstrip?: boolean;
  normalized?: boolean;
  special?: boolean;
}

export interface TokenizerJson {
  version?: string;
  truncation?: unknown;
  padding?: unknown;
  added_tokens?: AddedTokenConfig[];
  normalizer?: ComponentConfig | null;
  pre_tokenizer?: ComponentConfig | null;
  model: ComponentConfig;
  post_processor?: ComponentConfig | null;
  decoder?: ComponentConfig | null;
}

/** The `pattern` field of Split, Replace: a literal string or an Oniguruma regex. */
export type PatternConfig = { String: string } | { Regex: string };

export class TokenizerConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TokenizerConfigError';
  }
}

/** Error for a component type this implementation does not provide. */
export function unsupported(kind: string, type: unknown): TokenizerConfigError {
  return new TokenizerConfigError(`unsupported ${kind} type ${JSON.stringify(type)} in tokenizer.json`);
}

export function asComponent(value: unknown, kind: string): ComponentConfig {
  if (typeof value !== 'object' || value === null || typeof (value as { type?: unknown }).type !== 'string') {
    throw new TokenizerConfigError(`${kind} in tokenizer.json must be an object with a string "type"`);
  }
  return value as ComponentConfig;
}

export function fieldString(cfg: ComponentConfig, key: string, fallback?: string): string {
  const v = cfg[key];
  if (typeof v === 'string') return v;
  if ((v === undefined || v === null) && fallback !== undefined) return fallback;
  throw new TokenizerConfigError(`${cfg.type}.${key} must be a string`);
}

export function fieldBool(cfg: ComponentConfig, key: string, fallback: boolean): boolean {
  const v = cfg[key];
  if (typeof v === 'boolean') return v;
  if (v === undefined || v === null) return fallback;
  throw new TokenizerConfigError(`${cfg.type}.${key} must be a boolean`);
}

export function fieldNumber(cfg: ComponentConfig, key: string, fallback: number): number {
  const v = cfg[key];
  if (typeof v === 'number') return v;
  if (v === undefined || v === null) return fallback;
  throw new TokenizerConfigError(`${cfg.type}.${key} must be a number`);
}

export function fieldComponents(cfg: ComponentConfig, key: string): ComponentConfig[] {
  const v = cfg[key];
  if (!Array.isArray(v)) throw new TokenizerConfigError(`${cfg.type}.${key} must be an array`);
  return v.map((c) => asComponent(c, `${cfg.type}.${key}[]`));
}

export function fieldPattern(cfg: ComponentConfig, key = 'pattern'): PatternConfig {
  const v = cfg[key];
  if (typeof v === 'object' && v !== null) {
    if (typeof (v as { String?: unknown }).String === 'string') return { String: (v as { String: string }).String };
    if (typeof (v as { Regex?: unknown }).Regex === 'string') return { Regex: (v as { Regex: string }).Regex };
  }
  throw new TokenizerConfigError(`${cfg.type}.${key} must be {"String": ...} or {"Regex": ...}`);
}
