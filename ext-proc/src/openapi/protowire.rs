//! Just enough of the protobuf wire format to merge two OpenAPI v2
//! documents without decoding their schemas: a message is split into its
//! fields (each kept as the exact bytes it was sent as), and a field is
//! written back as key + length + payload. Fields the merge does not touch
//! pass through byte for byte, whatever their type.

use prost::encoding::{WireType, decode_key, decode_varint, encode_key, encode_varint};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("not a protobuf message: {0}")]
pub struct WireError(String);

/// One field of a message.
#[derive(Debug, Clone, Copy)]
pub struct Field<'a> {
    pub number: u32,
    /// The field as sent: key, length (if any) and value.
    pub raw: &'a [u8],
    /// The value of a length-delimited field (string, bytes, message).
    pub payload: Option<&'a [u8]>,
}

/// The fields of `msg`, in order.
pub fn fields(msg: &[u8]) -> Result<Vec<Field<'_>>, WireError> {
    let mut out = Vec::new();
    let mut rest = msg;
    while !rest.is_empty() {
        let start = msg.len() - rest.len();
        let (number, wire) = decode_key(&mut rest).map_err(|e| WireError(e.to_string()))?;
        let payload = match wire {
            WireType::Varint => {
                decode_varint(&mut rest).map_err(|e| WireError(e.to_string()))?;
                None
            }
            WireType::SixtyFourBit => {
                rest = rest.get(8..).ok_or_else(|| WireError("truncated fixed64".into()))?;
                None
            }
            WireType::ThirtyTwoBit => {
                rest = rest.get(4..).ok_or_else(|| WireError("truncated fixed32".into()))?;
                None
            }
            WireType::LengthDelimited => {
                let len = decode_varint(&mut rest).map_err(|e| WireError(e.to_string()))?;
                let len = usize::try_from(len).map_err(|_| WireError("length overflows".into()))?;
                let payload = rest.get(..len).ok_or_else(|| WireError(format!("field {number}: truncated")))?;
                rest = rest.get(len..).unwrap_or_default();
                Some(payload)
            }
            WireType::StartGroup | WireType::EndGroup => return Err(WireError("groups are not used by OpenAPI documents".into())),
        };
        let end = msg.len() - rest.len();
        out.push(Field { number, raw: msg.get(start..end).unwrap_or_default(), payload });
    }
    Ok(out)
}

/// The first length-delimited field `number` of `msg` as UTF-8 (an entry's
/// `name`).
pub fn string_field(msg: &[u8], number: u32) -> Result<Option<&str>, WireError> {
    for f in fields(msg)? {
        if f.number == number
            && let Some(p) = f.payload
        {
            return std::str::from_utf8(p).map(Some).map_err(|_| WireError(format!("field {number} is not UTF-8")));
        }
    }
    Ok(None)
}

/// Writes a length-delimited field.
pub fn write_message(out: &mut Vec<u8>, number: u32, payload: &[u8]) {
    encode_key(number, WireType::LengthDelimited, out);
    encode_varint(payload.len() as u64, out);
    out.extend_from_slice(payload);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_and_rewrites_every_wire_type() {
        let mut msg = Vec::new();
        write_message(&mut msg, 1, b"name");
        encode_key(2, WireType::Varint, &mut msg);
        encode_varint(300, &mut msg);
        encode_key(3, WireType::SixtyFourBit, &mut msg);
        msg.extend_from_slice(&[0; 8]);
        encode_key(4, WireType::ThirtyTwoBit, &mut msg);
        msg.extend_from_slice(&[0; 4]);
        let f = fields(&msg).unwrap();
        assert_eq!(f.iter().map(|f| f.number).collect::<Vec<_>>(), [1, 2, 3, 4]);
        assert_eq!(f.iter().flat_map(|f| f.raw.iter().copied()).collect::<Vec<_>>(), msg, "raw bytes are the message");
        assert_eq!(string_field(&msg, 1), Ok(Some("name")));
        assert_eq!(string_field(&msg, 9), Ok(None));
    }

    #[test]
    fn rejects_truncation_and_groups() {
        let mut msg = Vec::new();
        write_message(&mut msg, 1, b"name");
        assert!(fields(&msg[..msg.len() - 1]).is_err());
        assert!(fields(&[0x0b]).is_err(), "start group");
        assert!(fields(b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff").is_err());
        write_message(&mut msg, 2, b"\xff");
        assert!(string_field(&msg, 2).is_err());
    }
}
