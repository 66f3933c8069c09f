export const HELLO = 'core';
