//! The protobuf wire format, read-only: varints, tags, length-delimited fields, fixed-width
//! numbers and skipping unknown fields. Every read is bounds-checked and fails with a
//! [`WireError`] instead of panicking; callers attach the field path.

/// What is wrong with the bytes at the current position (the caller knows the field path).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum WireError {
    /// The input ends inside a varint, a fixed-width number or a length-delimited field.
    #[error("truncated input")]
    Truncated,
    /// A varint longer than 10 bytes.
    #[error("varint longer than 10 bytes")]
    VarintOverflow,
    /// Field number 0 or above 2^29-1.
    #[error("invalid field number {0}")]
    InvalidFieldNumber(u64),
    /// Wire types 6 and 7 do not exist; 4 (end group) without a start.
    #[error("invalid wire type {0}")]
    InvalidWireType(u8),
    /// Groups nested deeper than [`MAX_GROUP_DEPTH`] while skipping an unknown field.
    #[error("groups nested deeper than {MAX_GROUP_DEPTH}")]
    GroupTooDeep,
}

/// How deep nested (deprecated) groups may be when skipping an unknown field.
pub(crate) const MAX_GROUP_DEPTH: usize = 32;

/// The wire type of a field (the low 3 bits of its tag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WireType {
    /// 0: int32, int64, uint32, uint64, sint32, sint64, bool, enum.
    Varint,
    /// 1: fixed64, sfixed64, double.
    Fixed64,
    /// 2: string, bytes, embedded messages, packed repeated fields.
    Len,
    /// 3: start of a (deprecated) group.
    StartGroup,
    /// 4: end of a (deprecated) group.
    EndGroup,
    /// 5: fixed32, sfixed32, float.
    Fixed32,
}

impl WireType {
    fn from_bits(bits: u8) -> Result<Self, WireError> {
        Ok(match bits {
            0 => Self::Varint,
            1 => Self::Fixed64,
            2 => Self::Len,
            3 => Self::StartGroup,
            4 => Self::EndGroup,
            5 => Self::Fixed32,
            other => return Err(WireError::InvalidWireType(other)),
        })
    }

    /// The wire type number, for error messages.
    pub(crate) fn number(self) -> u8 {
        match self {
            Self::Varint => 0,
            Self::Fixed64 => 1,
            Self::Len => 2,
            Self::StartGroup => 3,
            Self::EndGroup => 4,
            Self::Fixed32 => 5,
        }
    }
}

/// A cursor over one message's bytes.
#[derive(Debug, Clone)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Reads a base-128 varint (at most 10 bytes; bits beyond 64 are dropped, as Go does).
    pub(crate) fn varint(&mut self) -> Result<u64, WireError> {
        let mut value: u64 = 0;
        for (i, &byte) in self.buf.iter().enumerate().take(10) {
            value |= u64::from(byte & 0x7f)
                .checked_shl(7 * i as u32)
                .unwrap_or(0);
            if byte & 0x80 == 0 {
                self.buf = self.buf.get(i + 1..).unwrap_or_default();
                return Ok(value);
            }
        }
        if self.buf.len() >= 10 {
            Err(WireError::VarintOverflow)
        } else {
            Err(WireError::Truncated)
        }
    }

    /// Reads a field tag: the field number and the wire type.
    pub(crate) fn tag(&mut self) -> Result<(u32, WireType), WireError> {
        let key = self.varint()?;
        let number = key >> 3;
        if number == 0 || number > (1 << 29) - 1 {
            return Err(WireError::InvalidFieldNumber(number));
        }
        let wire_type = WireType::from_bits((key & 7) as u8)?;
        // `number` fits: it was checked against 2^29-1 above.
        Ok((u32::try_from(number).unwrap_or(u32::MAX), wire_type))
    }

    /// Reads `n` raw bytes.
    fn take(&mut self, n: u64) -> Result<&'a [u8], WireError> {
        let n = usize::try_from(n).map_err(|_| WireError::Truncated)?;
        if n > self.buf.len() {
            return Err(WireError::Truncated);
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    /// Reads the payload of a length-delimited field.
    pub(crate) fn len_delimited(&mut self) -> Result<&'a [u8], WireError> {
        let len = self.varint()?;
        self.take(len)
    }

    /// Reads a little-endian 64-bit value (wire type 1).
    pub(crate) fn fixed64(&mut self) -> Result<u64, WireError> {
        let bytes = self.take(8)?;
        let mut arr = [0u8; 8];
        arr.copy_from_slice(bytes);
        Ok(u64::from_le_bytes(arr))
    }

    /// Skips the value of a field whose tag was just read (unknown fields are ignored, as
    /// the Go decoder does).
    pub(crate) fn skip(&mut self, wire_type: WireType) -> Result<(), WireError> {
        match wire_type {
            WireType::Varint => self.varint().map(drop),
            WireType::Fixed64 => self.take(8).map(drop),
            WireType::Fixed32 => self.take(4).map(drop),
            WireType::Len => self.len_delimited().map(drop),
            WireType::EndGroup => Err(WireError::InvalidWireType(4)),
            WireType::StartGroup => {
                let mut depth = 1usize;
                while depth > 0 {
                    let (_, wt) = self.tag()?;
                    match wt {
                        WireType::StartGroup => {
                            depth += 1;
                            if depth > MAX_GROUP_DEPTH {
                                return Err(WireError::GroupTooDeep);
                            }
                        }
                        WireType::EndGroup => depth -= 1,
                        other => self.skip(other)?,
                    }
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints() {
        assert_eq!(Reader::new(&[0]).varint(), Ok(0));
        assert_eq!(Reader::new(&[0x96, 0x01]).varint(), Ok(150));
        let max = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(Reader::new(&max).varint(), Ok(u64::MAX));
        assert_eq!(Reader::new(&[0x80]).varint(), Err(WireError::Truncated));
        assert_eq!(
            Reader::new(&[0xff; 11]).varint(),
            Err(WireError::VarintOverflow)
        );
        assert_eq!(Reader::new(&[]).varint(), Err(WireError::Truncated));
    }

    #[test]
    fn tags_and_lengths() {
        let mut r = Reader::new(&[0x0a, 0x02, b'h', b'i', 0x10, 0x01]);
        assert_eq!(r.tag(), Ok((1, WireType::Len)));
        assert_eq!(r.len_delimited(), Ok(&b"hi"[..]));
        assert_eq!(r.tag(), Ok((2, WireType::Varint)));
        assert_eq!(r.varint(), Ok(1));
        assert!(r.is_empty());
        assert_eq!(
            Reader::new(&[0x00]).tag(),
            Err(WireError::InvalidFieldNumber(0))
        );
        assert_eq!(
            Reader::new(&[0x0e]).tag(),
            Err(WireError::InvalidWireType(6))
        );
        assert_eq!(
            Reader::new(&[0x05, b'a']).len_delimited(),
            Err(WireError::Truncated)
        );
        let huge = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(
            Reader::new(&huge).len_delimited(),
            Err(WireError::Truncated)
        );
    }

    #[test]
    fn skipping() {
        // field 1 group containing field 2 varint, then end group.
        let mut r = Reader::new(&[0x0b, 0x10, 0x05, 0x0c]);
        let (_, wt) = r.tag().unwrap();
        r.skip(wt).unwrap();
        assert!(r.is_empty());
        let mut r = Reader::new(&[0x0b; 40]);
        let (_, wt) = r.tag().unwrap();
        assert_eq!(r.skip(wt), Err(WireError::GroupTooDeep));
        assert_eq!(
            Reader::new(&[1, 2, 3]).skip(WireType::Fixed64),
            Err(WireError::Truncated)
        );
    }
}
