/** `require('@nestjs/common')` under Jest: see bridged.cjs. */
module.exports = require('./bridged.cjs').bridged('@nestjs/common');
