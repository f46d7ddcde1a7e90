//! PVH entry: the Xen ELF note, the 32-bit stub that enters long mode, and
//! the reader of the `hvm_start_info` block QEMU hands over.
//!
//! QEMU's `-kernel` loader starts a PVH kernel in 32-bit protected mode with
//! paging off and `%ebx` pointing at `hvm_start_info`. The stub
//! zeroes `.bss`, identity-maps the first 4 GiB with 2 MiB pages (enough for
//! the kernel until it builds its own tables), enables long mode with NX,
//! and calls `kernel_main(start_info_paddr)` on a 16-byte aligned stack.

use crate::memmap::{E820Entry, MemoryMap, PhysRange};

core::arch::global_asm!(
    r#"
    .section .note.Xen, "a", @note
    .p2align 2
    .long 4                 /* name size: "Xen\0" */
    .long 8                 /* descriptor size: a 64-bit address */
    .long 18                /* XEN_ELFNOTE_PHYS32_ENTRY */
    .asciz "Xen"
    .p2align 2
    .quad pvh_start32

    .section .text.boot, "ax"
    .code32
    .global pvh_start32
pvh_start32:
    cli
    cld
    mov %ebx, %esi          /* keep the start-info address across the set-up */

    mov $__bss_start, %edi  /* zero .bss: stack and boot tables live there */
    mov $__bss_end, %ecx
    sub %edi, %ecx
    xor %eax, %eax
    rep stosb

    mov $boot_stack_top, %esp

    mov $boot_pdpt, %eax    /* PML4[0] -> PDPT */
    or $0x3, %eax
    mov %eax, boot_pml4

    mov $boot_pd, %eax      /* PDPT[0..4] -> four page directories */
    or $0x3, %eax
    mov %eax, boot_pdpt
    add $0x1000, %eax
    mov %eax, boot_pdpt + 8
    add $0x1000, %eax
    mov %eax, boot_pdpt + 16
    add $0x1000, %eax
    mov %eax, boot_pdpt + 24

    mov $boot_pd, %edi      /* 2048 entries of 2 MiB: present, writable, huge */
    xor %ecx, %ecx
1:
    mov %ecx, %eax
    shl $21, %eax
    or $0x83, %eax
    mov %eax, (%edi, %ecx, 8)
    mov %ecx, %edx
    shr $11, %edx
    mov %edx, 4(%edi, %ecx, 8)
    inc %ecx
    cmp $2048, %ecx
    jne 1b

    mov %cr4, %eax          /* PAE */
    or $0x20, %eax
    mov %eax, %cr4

    mov $boot_pml4, %eax
    mov %eax, %cr3

    mov $0xC0000080, %ecx   /* EFER: long mode enable and no-execute enable */
    rdmsr
    or $0x900, %eax
    wrmsr

    mov %cr0, %eax          /* paging, write protect, protected mode */
    or $0x80010001, %eax
    mov %eax, %cr0

    lgdt boot_gdt_ptr
    ljmp $0x08, $pvh_start64

    .code64
pvh_start64:
    mov $0x10, %ax
    mov %ax, %ds
    mov %ax, %es
    mov %ax, %ss
    mov %ax, %fs
    mov %ax, %gs
    mov %esi, %edi          /* zero-extends the start-info address into %rdi */
    lea boot_stack_top(%rip), %rsp
    xor %ebp, %ebp
    call kernel_main
2:
    cli
    hlt
    jmp 2b

    .section .rodata.boot, "a"
    .p2align 3
boot_gdt:
    .quad 0
    .quad 0x00af9a000000ffff    /* 0x08: 64-bit code */
    .quad 0x00cf92000000ffff    /* 0x10: data */
boot_gdt_end:
boot_gdt_ptr:
    .word boot_gdt_end - boot_gdt - 1
    .long boot_gdt

    .section .bss.boot, "aw", @nobits
    .p2align 12
boot_pml4:
    .skip 4096
boot_pdpt:
    .skip 4096
boot_pd:
    .skip 4096 * 4
    .global boot_stack_bottom
boot_stack_bottom:
    .skip 128 * 1024
boot_stack_top:
"#,
    options(att_syntax)
);

/// `hvm_start_info.magic` (the Xen PVH ABI).
const START_INFO_MAGIC: u32 = 0x336e_c578;
/// Size of `hvm_start_info` up to and including the version-1 fields.
const START_INFO_SIZE: u64 = 56;
/// Size of one `hvm_memmap_table_entry`.
const MEMMAP_ENTRY_SIZE: u64 = 24;
/// Size of one `hvm_modlist_entry`.
const MODLIST_ENTRY_SIZE: u64 = 32;
/// Longest kernel command line kept; longer ones are rejected.
pub const CMDLINE_MAX: usize = 256;

/// Why the boot information could not be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootError {
    /// `%ebx` did not point at a PVH start-info block.
    BadMagic(u32),
    /// The start-info block predates the memory map (version 0).
    NoMemoryMap,
    /// More memory-map entries than the kernel keeps.
    MemoryMapTooLong(u32),
    /// The command line is longer than [`CMDLINE_MAX`] bytes.
    CmdlineTooLong,
    /// More boot-data ranges than the kernel keeps.
    TooManyBootRanges,
}

impl core::fmt::Display for BootError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::BadMagic(m) => write!(f, "start info magic {m:#x} is not PVH"),
            Self::NoMemoryMap => write!(f, "start info version 0 carries no memory map"),
            Self::MemoryMapTooLong(n) => write!(f, "memory map has {n} entries, too many"),
            Self::CmdlineTooLong => write!(f, "command line longer than {CMDLINE_MAX} bytes"),
            Self::TooManyBootRanges => write!(f, "too many boot modules"),
        }
    }
}

/// Most boot-data ranges remembered (start info, map, command line, modules).
const BOOT_RANGES_MAX: usize = 16;

/// Everything the kernel keeps from the start-info block, copied out of the
/// loader's memory so that memory can be reasoned about independently.
pub struct BootInfo {
    /// The firmware memory map.
    pub memmap: MemoryMap,
    cmdline: [u8; CMDLINE_MAX],
    cmdline_len: usize,
    /// Physical ranges holding boot data (start info, map, command line,
    /// modules): never handed to the allocator.
    boot_ranges: [PhysRange; BOOT_RANGES_MAX],
    boot_ranges_len: usize,
    /// Physical address of the ACPI RSDP, if the loader gave it (0: search
    /// the BIOS areas for it).
    pub rsdp: u64,
}

impl BootInfo {
    /// The kernel command line (`-append`), empty if none was given.
    pub fn cmdline(&self) -> &str {
        // Invalid UTF-8 is reported by the parser as an unknown word.
        core::str::from_utf8(&self.cmdline[..self.cmdline_len]).unwrap_or("\u{fffd}")
    }

    /// Physical ranges of boot data the allocator must not receive.
    pub fn boot_ranges(&self) -> &[PhysRange] {
        &self.boot_ranges[..self.boot_ranges_len]
    }

    fn push_boot_range(&mut self, start: u64, len: u64) -> Result<(), BootError> {
        if len == 0 {
            return Ok(());
        }
        let slot = self
            .boot_ranges
            .get_mut(self.boot_ranges_len)
            .ok_or(BootError::TooManyBootRanges)?;
        *slot = PhysRange::new(start, start.saturating_add(len));
        self.boot_ranges_len += 1;
        Ok(())
    }

    /// Reads and copies the start-info block at physical address `paddr`.
    ///
    /// # Safety
    /// `paddr` must be the value QEMU passed in `%ebx`, and the structures it
    /// points to must be mapped (the boot tables identity-map 4 GiB).
    pub unsafe fn read(paddr: u64) -> Result<Self, BootError> {
        let at = |off: u64| paddr + off;
        // SAFETY: the caller guarantees the start-info block is mapped and
        // readable; unaligned reads because nothing promises alignment.
        let (magic, version, nr_modules, modlist, cmdline, rsdp, memmap, entries) = unsafe {
            (
                read::<u32>(at(0)),
                read::<u32>(at(4)),
                read::<u32>(at(12)),
                read::<u64>(at(16)),
                read::<u64>(at(24)),
                read::<u64>(at(32)),
                read::<u64>(at(40)),
                read::<u32>(at(48)),
            )
        };
        if magic != START_INFO_MAGIC {
            return Err(BootError::BadMagic(magic));
        }
        if version < 1 {
            return Err(BootError::NoMemoryMap);
        }
        let mut info = BootInfo {
            memmap: MemoryMap::new(),
            cmdline: [0; CMDLINE_MAX],
            cmdline_len: 0,
            boot_ranges: [PhysRange::EMPTY; BOOT_RANGES_MAX],
            boot_ranges_len: 0,
            rsdp,
        };
        info.push_boot_range(paddr, START_INFO_SIZE)?;

        for i in 0..u64::from(entries) {
            let e = memmap + i * MEMMAP_ENTRY_SIZE;
            // SAFETY: entry `i` of the map the start info describes.
            let entry = unsafe {
                E820Entry {
                    addr: read(e),
                    size: read(e + 8),
                    kind: read(e + 16),
                }
            };
            info.memmap
                .push(entry)
                .map_err(|_| BootError::MemoryMapTooLong(entries))?;
        }
        info.push_boot_range(memmap, u64::from(entries) * MEMMAP_ENTRY_SIZE)?;

        if cmdline != 0 {
            let mut len = 0;
            loop {
                // SAFETY: the command line is a NUL-terminated string.
                let byte: u8 = unsafe { read(cmdline + len as u64) };
                if byte == 0 {
                    break;
                }
                *info.cmdline.get_mut(len).ok_or(BootError::CmdlineTooLong)? = byte;
                len += 1;
            }
            info.cmdline_len = len;
            info.push_boot_range(cmdline, len as u64 + 1)?;
        }

        // Modules (an `-initrd`) are not used, but their memory is boot data.
        info.push_boot_range(modlist, u64::from(nr_modules) * MODLIST_ENTRY_SIZE)?;
        for i in 0..u64::from(nr_modules) {
            let m = modlist + i * MODLIST_ENTRY_SIZE;
            // SAFETY: entry `i` of the module list the start info describes.
            let (start, size) = unsafe { (read::<u64>(m), read::<u64>(m + 8)) };
            info.push_boot_range(start, size)?;
        }
        Ok(info)
    }
}

/// Reads a `T` at physical address `paddr` through the identity map.
///
/// # Safety
/// `paddr .. paddr + size_of::<T>()` must be mapped and readable.
unsafe fn read<T: Copy>(paddr: u64) -> T {
    // SAFETY: forwarded to the caller; unaligned read needs no alignment.
    unsafe { core::ptr::read_unaligned(paddr as *const T) }
}

unsafe extern "C" {
    static __kernel_start: u8;
    static __kernel_end: u8;
}

/// The physical span of the kernel image, `.bss`, boot tables and stack.
pub fn kernel_image() -> PhysRange {
    // Linker-script symbols: only their addresses are taken.
    PhysRange::new(
        &raw const __kernel_start as u64,
        &raw const __kernel_end as u64,
    )
}
