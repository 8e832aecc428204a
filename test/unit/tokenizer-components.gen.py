"""Generates tokenizer-components.expected.json: outputs of the reference HF `tokenizers` library for
individual normalizers, pre-tokenizers (incl. Oniguruma regex translation), decoders and small
complete tokenizers. Run: /work/venv/bin/python test/unit/tokenizer-components.gen.py"""
import json
import os
import random

from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, '..', 'fixtures', 'tokenizers')

big = [c['text'] for c in json.load(open(os.path.join(FIX, 'bytelevel', 'cases.json')))['cases'] if len(c['text']) > 5000][0]

TEXTS = [
    "", " ", "  ", "a", " a", "Hello world", "Hello  world ", "  leading", "trailing  ",
    "I'M HERE, YOU'RE DON'T we'Ve it'S they'LL I'd", "don't 's 'S",
    "tab\there\t\tx", "new\nline\n\n\nx", "crlf\r\nline\r\n\r\n", "mixed \t\n \r\n  end   ",
    "nbsp\u00a0x ideo\u3000y nel\u0085z bom\ufeffw zwsp\u200bq", "\u2028ls\u2029ps",
    "1234567 3.14 -42 1e-9 0x1F 1,000 \u0661\u0662\u0663 \u00b2 \u2167 \uff11\uff12",
    "中文段落：人工智能正在改变世界。", "日本語：吾輩は猫である。カタカナ、ひらがな", "한국어: 다람쥐 헌 쳇바퀴에",
    "Emoji 😀👍🏽 👨\u200d👩\u200d👧 🇺🇸 1️⃣", "naïve cafe\u0301 Å ﬁ ǅ Ελληνικά Русский ẞß İı",
    "def f(x):\n    return x**2  # sq\n", "a<b>c</b> &amp; {\"k\": [1, 2]}", "«quote» — … ¿qué? ¡sí!",
    "ไทย ภาษา देवनागरी हिन्दी العربية", "under_score snake_case CamelCase HTTPServer", "$100 + 5% = ~£3 @user #tag",
    "a\u2581b \u2581\u2581c", "x" * 300,
]
# The long mixed text only goes through the production regexes (keeps the expected file small).
WITH_BIG = TEXTS + [big[:3000]]

out = {'normalizers': [], 'pre_tokenizers': [], 'decoders': [], 'tokenizers': []}

def add_norm(cfg):
    n = normalizers.Normalizer.custom if False else None
    tok = Tokenizer.from_str(json.dumps({'model': {'type': 'BPE', 'vocab': {}, 'merges': []}, 'normalizer': cfg}))
    norm = tok.normalizer
    out['normalizers'].append({'config': cfg, 'cases': [[t, norm.normalize_str(t)] for t in TEXTS]})

for cfg in [
    {'type': 'NFC'}, {'type': 'NFD'}, {'type': 'NFKC'}, {'type': 'NFKD'}, {'type': 'Lowercase'},
    {'type': 'Prepend', 'prepend': '\u2581'},
    {'type': 'Replace', 'pattern': {'String': ' '}, 'content': '\u2581'},
    {'type': 'Replace', 'pattern': {'Regex': ' {2,}'}, 'content': ' '},
    {'type': 'Replace', 'pattern': {'Regex': '\\s+'}, 'content': '$1_'},
    {'type': 'Strip', 'strip_left': True, 'strip_right': True},
    {'type': 'Strip', 'strip_left': False, 'strip_right': True},
    {'type': 'StripAccents'},
    {'type': 'Sequence', 'normalizers': [{'type': 'NFD'}, {'type': 'StripAccents'}, {'type': 'Lowercase'}]},
    {'type': 'Sequence', 'normalizers': [{'type': 'Prepend', 'prepend': '\u2581'}, {'type': 'Replace', 'pattern': {'String': ' '}, 'content': '\u2581'}]},
]:
    add_norm(cfg)

REGEXES = [
    # Qwen2 / Llama 3 / GPT-4o style
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    # GPT-2
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
    # DeepSeek-style pieces
    "\\p{N}{1,3}", "[一-龥\u3040-ゟ゠-ヿ]+", "[\\p{Han}]+|[\\p{Hiragana}\\p{Katakana}]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    # translation features
    "(?i)hello|world", "(?i:[a-c]+x)", "\\s++\\S", "(?>a+)b|\\w+", "\\d+", "\\w+", "\\W+", "[[:alpha:]]+", "[[:punct:]]+",
    "\\h+", ".+", "^\\s+|\\s+$", "[^\\s]+", "a{2,}|x{,3}", "\\x{4e2d}|\\u6587", "\\S+", "(?:ab)*+c?", "\\bthe\\b",
    "(?m:.)+", "(?i:straße|ǅ)", "\\p{Lu}\\p{Ll}+", "[\\d\\s]+", "(a|b)\\1",
]

def add_pre(cfg, texts=TEXTS):
    try:
        tok = Tokenizer.from_str(json.dumps({'model': {'type': 'BPE', 'vocab': {}, 'merges': []}, 'pre_tokenizer': cfg}))
        pt = tok.pre_tokenizer
        cases = [[t, [p for p, _ in pt.pre_tokenize_str(t)]] for t in texts]
    except Exception as e:  # pattern the reference cannot compile: skip
        print('skip', cfg, e)
        return
    out['pre_tokenizers'].append({'config': cfg, 'cases': cases})

for i, r in enumerate(REGEXES):
    add_pre({'type': 'Split', 'pattern': {'Regex': r}, 'behavior': 'Isolated', 'invert': False}, WITH_BIG if i < 4 else TEXTS)
for b in ['Removed', 'Isolated', 'MergedWithPrevious', 'MergedWithNext', 'Contiguous']:
    for inv in [False, True]:
        add_pre({'type': 'Split', 'pattern': {'Regex': '\\s'}, 'behavior': b, 'invert': inv})
        add_pre({'type': 'Split', 'pattern': {'String': 'a'}, 'behavior': b, 'invert': inv})
for aps in [False, True]:
    for ur in [False, True]:
        add_pre({'type': 'ByteLevel', 'add_prefix_space': aps, 'trim_offsets': True, 'use_regex': ur})
for scheme in ['first', 'always', 'never']:
    for split in [True, False]:
        add_pre({'type': 'Metaspace', 'replacement': '\u2581', 'prepend_scheme': scheme, 'split': split})
add_pre({'type': 'Digits', 'individual_digits': True})
add_pre({'type': 'Digits', 'individual_digits': False})
add_pre({'type': 'Whitespace'})
add_pre({'type': 'WhitespaceSplit'})
for b in ['Isolated', 'Removed', 'MergedWithPrevious', 'MergedWithNext', 'Contiguous']:
    add_pre({'type': 'Punctuation', 'behavior': b})
add_pre({'type': 'BertPreTokenizer'})
add_pre({'type': 'Sequence', 'pretokenizers': [{'type': 'WhitespaceSplit'}, {'type': 'Digits', 'individual_digits': True}, {'type': 'Punctuation', 'behavior': 'Isolated'}]})
add_pre({'type': 'Sequence', 'pretokenizers': [{'type': 'Split', 'pattern': {'Regex': '\\p{N}{1,3}'}, 'behavior': 'Isolated', 'invert': False}, {'type': 'ByteLevel', 'add_prefix_space': False, 'trim_offsets': False, 'use_regex': True}]})

# Decoders over random token lists built from an alphabet that exercises each rule.
rnd = random.Random(7)
ALPHA = ['\u2581', '\u2581a', 'b', '\u2581\u2581', '<0xE4>', '<0xB8>', '<0xAD>', '<0xC3>', '<0xA9>', '<0x20>', '<0x0A>', 'Ġhi', 'Ċ', 'ä¸', 'Ń', 'x', ' ', '  y ', '<s>', '##ing', 'ab</w>']
def rand_tokens():
    return [rnd.choice(ALPHA) for _ in range(rnd.randint(0, 8))]
TOKEN_LISTS = [[], ['\u2581a'], ['\u2581', '\u2581a'], ['<0xE4>', '<0xB8>', '<0xAD>'], ['<0xE4>', 'x', '<0xB8>']] + [rand_tokens() for _ in range(150)]

def add_dec(cfg):
    tok = Tokenizer.from_str(json.dumps({'model': {'type': 'BPE', 'vocab': {}, 'merges': []}, 'decoder': cfg}))
    d = tok.decoder
    cases = []
    for t in TOKEN_LISTS:
        try:
            cases.append([t, d.decode(t)])
        except BaseException:  # the reference panics on some inputs (Strip past the token): skip those
            pass
    out['decoders'].append({'config': cfg, 'cases': cases})

for cfg in [
    {'type': 'ByteLevel', 'add_prefix_space': True, 'trim_offsets': True, 'use_regex': True},
    {'type': 'ByteFallback'}, {'type': 'Fuse'},
    {'type': 'Metaspace', 'replacement': '\u2581', 'prepend_scheme': 'always', 'split': True},
    {'type': 'Metaspace', 'replacement': '\u2581', 'prepend_scheme': 'first', 'split': True},
    {'type': 'Metaspace', 'replacement': '\u2581', 'prepend_scheme': 'never', 'split': True},
    {'type': 'Replace', 'pattern': {'String': '\u2581'}, 'content': ' '},
    {'type': 'Replace', 'pattern': {'Regex': '\\s+'}, 'content': '_'},
    {'type': 'Strip', 'content': ' ', 'start': 1, 'stop': 0},
    {'type': 'Strip', 'content': ' ', 'start': 2, 'stop': 1},
    {'type': 'WordPiece', 'prefix': '##', 'cleanup': True},
    {'type': 'BPEDecoder', 'suffix': '</w>'},
    {'type': 'Sequence', 'decoders': [{'type': 'Replace', 'pattern': {'String': '\u2581'}, 'content': ' '}, {'type': 'ByteFallback'}, {'type': 'Fuse'}, {'type': 'Strip', 'content': ' ', 'start': 1, 'stop': 0}]},
]:
    add_dec(cfg)

# Small complete tokenizers exercising BPE options and added-token rules.
def vocab_from(chars, extra):
    v = {}
    for c in chars + extra:
        if c not in v:
            v[c] = len(v)
    return v

def add_tok(tj, texts):
    name = tj.pop('_name')
    tok = Tokenizer.from_str(json.dumps(tj))
    cases = []
    for t in texts:
        e1 = tok.encode(t, add_special_tokens=False).ids
        e2 = tok.encode(t).ids
        cases.append({'text': t, 'ids': e1, 'ids_special': e2, 'decoded': tok.decode(e2, skip_special_tokens=False), 'decoded_skip': tok.decode(e2, skip_special_tokens=True)})
    out['tokenizers'].append({'name': name, 'tokenizer': tj, 'cases': cases})

letters = list('abcdefghijklmnopqrstuvwxyz')
# 1. continuing_subword_prefix / end_of_word_suffix, unk with fuse_unk, merges as pairs
v = vocab_from(['[UNK]'] + letters + ['##' + c for c in letters] + [c + '</w>' for c in letters] + ['##' + c + '</w>' for c in letters], ['th', '##e</w>', 'the</w>', '##er', '##in', '##ing</w>', 'in', 'ing</w>'])
TEXTS_WORD = ['the', 'there thing', 'ing in', 'THE Ünï x9y', '', 'zzz', 'the\nthe']
add_tok({'_name': 'wordpiece-style-bpe', 'model': {'type': 'BPE', 'vocab': v, 'merges': [['t', '##h'], ['th', '##e</w>'], ['##e', '##r'], ['i', '##n'], ['##i', '##n'], ['##in', '##g</w>'], ['in', '##g</w>']],
         'unk_token': '[UNK]', 'continuing_subword_prefix': '##', 'end_of_word_suffix': '</w>', 'fuse_unk': True, 'byte_fallback': False},
         'pre_tokenizer': {'type': 'Whitespace'}, 'decoder': {'type': 'WordPiece', 'prefix': '##', 'cleanup': True}}, TEXTS_WORD)
v2 = vocab_from(['<unk>'] + letters + [' '], ['ab', 'abc', 'abcd'])
add_tok({'_name': 'unk-no-fuse', 'model': {'type': 'BPE', 'vocab': v2, 'merges': ['a b', 'ab c'], 'unk_token': '<unk>', 'fuse_unk': False}}, ['abc', 'aXYZb', 'éé abcd', 'ABC'])
add_tok({'_name': 'ignore-merges', 'model': {'type': 'BPE', 'vocab': v2, 'merges': ['a b', 'ab c'], 'ignore_merges': True, 'unk_token': '<unk>'},
         'pre_tokenizer': {'type': 'WhitespaceSplit'}}, ['abcd abc ab', 'abcdab'])
# 2. added tokens: lstrip / rstrip / single_word / normalized with a Lowercase normalizer
v3 = vocab_from(['<unk>'] + letters + [' ', '<', '>', '/', '|', '_'], [])
added = [
    {'id': len(v3), 'content': '<mask>', 'single_word': False, 'lstrip': True, 'rstrip': False, 'normalized': False, 'special': True},
    {'id': len(v3) + 1, 'content': '<R>', 'single_word': False, 'lstrip': False, 'rstrip': True, 'normalized': False, 'special': True},
    {'id': len(v3) + 2, 'content': 'word', 'single_word': True, 'lstrip': False, 'rstrip': False, 'normalized': False, 'special': False},
    {'id': len(v3) + 3, 'content': 'HeLLo', 'single_word': False, 'lstrip': False, 'rstrip': False, 'normalized': True, 'special': False},
    {'id': len(v3) + 4, 'content': '<|end|>', 'single_word': False, 'lstrip': False, 'rstrip': False, 'normalized': False, 'special': True},
    {'id': len(v3) + 5, 'content': '<|end|>x', 'single_word': False, 'lstrip': False, 'rstrip': False, 'normalized': False, 'special': False},
]
add_tok({'_name': 'added-token-rules', 'normalizer': {'type': 'Lowercase'}, 'model': {'type': 'BPE', 'vocab': v3, 'merges': [], 'unk_token': '<unk>'}, 'added_tokens': added,
         'post_processor': {'type': 'TemplateProcessing', 'single': [{'SpecialToken': {'id': '<|end|>', 'type_id': 0}}, {'Sequence': {'id': 'A', 'type_id': 0}}, {'SpecialToken': {'id': '<R>', 'type_id': 0}}],
                            'pair': [{'Sequence': {'id': 'A', 'type_id': 0}}, {'Sequence': {'id': 'B', 'type_id': 1}}],
                            'special_tokens': {'<|end|>': {'id': '<|end|>', 'ids': [len(v3) + 4], 'tokens': ['<|end|>']}, '<R>': {'id': '<R>', 'ids': [len(v3) + 1], 'tokens': ['<R>']}}}},
        ['a <mask> b', 'a   <mask>b', '<mask>', 'x<R>   y', 'word words sword a word', 'hello HELLO hElLo', 'a<|end|>xb<|end|>', '<|end|><|end|>', 'word_word', 'a  <mask>  <mask>', '\u00a0<mask>'])
# 3. Metaspace (first) + byte fallback with special tokens inside the text
v4 = vocab_from(['<unk>', '<s>', '</s>'] + ['<0x%02X>' % b for b in range(256)] + ['\u2581'] + letters, ['\u2581a', '\u2581ab'])
add_tok({'_name': 'metaspace-first-bytefallback', 'model': {'type': 'BPE', 'vocab': v4, 'merges': [['\u2581', 'a'], ['\u2581a', 'b']], 'unk_token': '<unk>', 'byte_fallback': True},
         'added_tokens': [{'id': i, 'content': c, 'special': True, 'normalized': False, 'single_word': False, 'lstrip': False, 'rstrip': False} for i, c in [(1, '<s>'), (2, '</s>')]],
         'pre_tokenizer': {'type': 'Metaspace', 'replacement': '\u2581', 'prepend_scheme': 'first', 'split': False},
         'post_processor': {'type': 'TemplateProcessing', 'single': [{'SpecialToken': {'id': '<s>', 'type_id': 0}}, {'Sequence': {'id': 'A', 'type_id': 0}}], 'pair': [{'Sequence': {'id': 'A', 'type_id': 0}}, {'Sequence': {'id': 'B', 'type_id': 1}}], 'special_tokens': {'<s>': {'id': '<s>', 'ids': [1], 'tokens': ['<s>']}}},
         'decoder': {'type': 'Metaspace', 'replacement': '\u2581', 'prepend_scheme': 'first', 'split': False}},
        ['ab ab', ' ab', '<s>ab ab</s> ab', 'ab<s> ab', 'é中😀 ab', '', '  ', 'ab\n\nab'])

with open(os.path.join(HERE, 'tokenizer-components.expected.json'), 'w') as f:
    json.dump(out, f, ensure_ascii=False, indent=None, separators=(',', ':'))
print({k: len(v) for k, v in out.items()})
