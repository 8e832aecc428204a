// Loads everything text-related from a model directory: tokenizer.json, tokenizer_config.json
// (special tokens, add_bos_token, chat templates), chat_template.jinja and generation_config.json.

import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { basename, join } from 'node:path';

import type { ComponentConfig, TokenizerJson } from './tokenizer-json.js';
import { TokenizerConfigError } from './tokenizer-json.js';
import { Tokenizer } from './tokenizer.js';

export interface TokenizerBundle {
  tokenizer: Tokenizer;
  bosToken: string | null;
  eosToken: string | null;
  padToken: string | null;
  unkToken: string | null;
  bosTokenId: number | null;
  eosTokenId: number | null;
  padTokenId: number | null;
  /** tokenizer_config.json's add_bos_token / add_eos_token, null when absent. */
  addBosToken: boolean | null;
  addEosToken: boolean | null;
  /** Named chat templates; a single template is stored as "default". */
  chatTemplates: Record<string, string>;
  /** Token ids that end generation: generation_config eos_token_id(s) plus the tokenizer's eos. */
  stopTokenIds: Set<number>;
  /** Every special token string the template may reference (bos_token, eos_token, ...). */
  specialTokens: Record<string, string>;
  /** tokenizer_config's clean_up_tokenization_spaces (reported only; decode() does not apply it). */
  cleanUpTokenizationSpaces: boolean;
}

type Json = Record<string, unknown>;

function readJson(path: string): Json | null {
  if (!existsSync(path)) return null;
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new TokenizerConfigError(`${path} is not valid JSON: ${(err as Error).message}`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new TokenizerConfigError(`${path} must hold a JSON object`);
  }
  return parsed as Json;
}

/** A special token given as a string or as an AddedToken object ({"content": ...}). */
export function specialTokenString(value: unknown): string | null {
  if (typeof value === 'string') return value;
  if (typeof value === 'object' && value !== null && typeof (value as { content?: unknown }).content === 'string') {
    return (value as { content: string }).content;
  }
  return null;
}

/** chat_template as a string or a list of {name, template}; returns name -> template. */
export function parseChatTemplateField(value: unknown, where: string): Record<string, string> {
  if (value === undefined || value === null) return {};
  if (typeof value === 'string') return { default: value };
  if (Array.isArray(value)) {
    const out: Record<string, string> = {};
    for (const item of value) {
      const name = (item as { name?: unknown }).name;
      const template = (item as { template?: unknown }).template;
      if (typeof name !== 'string' || typeof template !== 'string') {
        throw new TokenizerConfigError(`${where}: chat_template list entries need string "name" and "template"`);
      }
      out[name] = template;
    }
    return out;
  }
  throw new TokenizerConfigError(`${where}: chat_template must be a string or a list of named templates`);
}

function idList(value: unknown): number[] {
  if (typeof value === 'number' && Number.isInteger(value)) return [value];
  if (Array.isArray(value)) return value.filter((v): v is number => typeof v === 'number' && Number.isInteger(v));
  return [];
}

/** Loads chat templates with transformers' precedence: tokenizer_config < chat_template.json < .jinja files. */
function loadChatTemplates(dir: string, tokenizerConfig: Json | null): Record<string, string> {
  const templates: Record<string, string> = {
    ...parseChatTemplateField(tokenizerConfig?.['chat_template'], join(dir, 'tokenizer_config.json')),
  };
  const processorTemplate = readJson(join(dir, 'chat_template.json'));
  if (processorTemplate !== null) {
    Object.assign(templates, parseChatTemplateField(processorTemplate['chat_template'], join(dir, 'chat_template.json')));
  }
  const jinja = join(dir, 'chat_template.jinja');
  if (existsSync(jinja)) templates['default'] = readFileSync(jinja, 'utf8');
  const extraDir = join(dir, 'additional_chat_templates');
  if (existsSync(extraDir)) {
    for (const f of readdirSync(extraDir)) {
      if (f.endsWith('.jinja')) templates[basename(f, '.jinja')] = readFileSync(join(extraDir, f), 'utf8');
    }
  }
  return templates;
}

/**
 * transformers (v5) rebuilds the post-processor as `[bos] $A [eos]` when tokenizer_config sets
 * add_bos_token / add_eos_token explicitly, or when tokenizer.json has none.
 */
function bosEosTemplate(bos: [string, number] | null, eos: [string, number] | null): ComponentConfig {
  const single: unknown[] = [];
  const specialTokens: Record<string, unknown> = {};
  if (bos !== null) {
    single.push({ SpecialToken: { id: bos[0], type_id: 0 } });
    specialTokens[bos[0]] = { id: bos[0], ids: [bos[1]], tokens: [bos[0]] };
  }
  single.push({ Sequence: { id: 'A', type_id: 0 } });
  if (eos !== null) {
    single.push({ SpecialToken: { id: eos[0], type_id: 0 } });
    specialTokens[eos[0]] = { id: eos[0], ids: [eos[1]], tokens: [eos[0]] };
  }
  const pair: unknown[] = [...single];
  if (bos !== null) pair.push({ SpecialToken: { id: bos[0], type_id: 1 } });
  pair.push({ Sequence: { id: 'B', type_id: 1 } });
  if (eos !== null) pair.push({ SpecialToken: { id: eos[0], type_id: 1 } });
  return { type: 'TemplateProcessing', single, pair, special_tokens: specialTokens };
}

export function loadTokenizerDir(dir: string): TokenizerBundle {
  const tokenizerPath = join(dir, 'tokenizer.json');
  if (!existsSync(tokenizerPath)) {
    throw new TokenizerConfigError(`${dir} has no tokenizer.json (only Hugging Face fast tokenizers are supported)`);
  }
  const tokenizerJson = readJson(tokenizerPath)!;
  const tokenizer = Tokenizer.fromJSON(tokenizerJson as unknown as TokenizerJson);
  const config = readJson(join(dir, 'tokenizer_config.json'));
  const generation = readJson(join(dir, 'generation_config.json'));

  const specialTokens: Record<string, string> = {};
  for (const key of ['bos_token', 'eos_token', 'pad_token', 'unk_token', 'sep_token', 'cls_token', 'mask_token']) {
    const s = specialTokenString(config?.[key]);
    if (s !== null) specialTokens[key] = s;
  }
  const idOf = (s: string | undefined): number | null => (s === undefined ? null : tokenizer.tokenToId(s) ?? null);
  const bosToken = specialTokens['bos_token'] ?? null;
  const eosToken = specialTokens['eos_token'] ?? null;
  const bosTokenId = idOf(specialTokens['bos_token']);
  const eosTokenId = idOf(specialTokens['eos_token']);

  const addBos = typeof config?.['add_bos_token'] === 'boolean' ? config['add_bos_token'] : null;
  const addEos = typeof config?.['add_eos_token'] === 'boolean' ? config['add_eos_token'] : null;
  const hasPostProcessor = tokenizerJson['post_processor'] !== undefined && tokenizerJson['post_processor'] !== null;
  if (addBos !== null || addEos !== null || !hasPostProcessor) {
    const bos = addBos === true && bosToken !== null && bosTokenId !== null ? [bosToken, bosTokenId] as [string, number] : null;
    const eos = addEos === true && eosToken !== null && eosTokenId !== null ? [eosToken, eosTokenId] as [string, number] : null;
    tokenizer.setPostProcessor(bosEosTemplate(bos, eos));
  }

  const stopTokenIds = new Set<number>(idList(generation?.['eos_token_id']));
  if (eosTokenId !== null) stopTokenIds.add(eosTokenId);

  return {
    tokenizer,
    bosToken,
    eosToken,
    padToken: specialTokens['pad_token'] ?? null,
    unkToken: specialTokens['unk_token'] ?? null,
    bosTokenId,
    eosTokenId,
    padTokenId: idOf(specialTokens['pad_token']),
    addBosToken: addBos,
    addEosToken: addEos,
    chatTemplates: loadChatTemplates(dir, config),
    stopTokenIds,
    specialTokens,
    cleanUpTokenizationSpaces: config?.['clean_up_tokenization_spaces'] === true,
  };
}
