export const HELLO = 'core';
//# sourceMappingURL=index.js.map