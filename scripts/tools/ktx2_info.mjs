// What ktx-parse (a KTX 2.0 reader independent of diffrec's writer) reads from each .ktx2
// file named on the command line; prints one JSON object {path: {header fields, levels,
// first DFD block, key/value data}}.
//   node scripts/tools/ktx2_info.mjs texture_kd.ktx2
import { readFile } from "node:fs/promises";
import { read } from "ktx-parse";

const infos = {};
for (const file of process.argv.slice(2)) {
  const texture = read(new Uint8Array(await readFile(file)));
  const [dfd] = texture.dataFormatDescriptor;
  infos[file] = {
    vkFormat: texture.vkFormat, typeSize: texture.typeSize, pixelWidth: texture.pixelWidth,
    pixelHeight: texture.pixelHeight, pixelDepth: texture.pixelDepth,
    layerCount: texture.layerCount, faceCount: texture.faceCount,
    supercompressionScheme: texture.supercompressionScheme,
    levels: texture.levels.map((level) => ({
      byteLength: level.levelData.byteLength,
      byteSum: level.levelData.reduce((sum, byte) => sum + byte, 0),
      uncompressedByteLength: level.uncompressedByteLength,
    })),
    dfd: {
      colorModel: dfd.colorModel, colorPrimaries: dfd.colorPrimaries,
      transferFunction: dfd.transferFunction, flags: dfd.flags,
      texelBlockDimension: dfd.texelBlockDimension, bytesPlane: dfd.bytesPlane,
      channels: dfd.samples.map((sample) => sample.channelType),
      bitLengths: dfd.samples.map((sample) => sample.bitLength),
    },
    keyValue: texture.keyValue,
  };
}
console.log(JSON.stringify(infos));
