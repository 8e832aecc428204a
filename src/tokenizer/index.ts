// Public surface of the tokenizer package.

export { loadTokenizerDir, type TokenizerBundle, specialTokenString, parseChatTemplateField } from './load-tokenizer.js';
export { type AddedToken, type DecodeOptions, type EncodeOptions, Tokenizer } from './tokenizer.js';
export { TokenizerConfigError, type TokenizerJson } from './tokenizer-json.js';
export { RegexTranslationError } from './onig-regex.js';
