//! `#[derive(Equivalence)]` for Tsunagi's Rust API.
//!
//! The derive builds an MPI struct datatype for a Rust struct: one block per field, at the
//! field's offset (`core::mem::offset_of!`), with the field type's own datatype (so every
//! field type must implement `tsunagi::datatype::Equivalence`), then resizes it to
//! `size_of::<Self>()` so that slices and arrays of the struct have the right stride. The
//! datatype is committed and built once per type: non-generic types cache it in a static
//! `OnceLock`, generic types in a per-`TypeId` cache.
//!
//! Padding bytes are not part of the datatype, so they are neither read nor written.
//! Enums and unions are rejected (their active field is not known to a datatype).

use proc_macro::TokenStream;
use proc_macro2::TokenStream as TokenStream2;
use quote::quote;
use syn::{parse_macro_input, parse_quote, Data, DeriveInput, Fields, Index};

/// Derive `tsunagi::datatype::Equivalence` for a struct whose fields all implement it.
///
/// ```ignore
/// #[derive(Equivalence, Clone, Copy)]
/// #[repr(C)]
/// struct Particle { id: u32, pos: [f64; 3], charge: f32 }
/// ```
#[proc_macro_derive(Equivalence)]
pub fn derive_equivalence(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(input) {
        Ok(ts) => ts.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn expand(input: DeriveInput) -> syn::Result<TokenStream2> {
    let name = &input.ident;
    let fields = match &input.data {
        Data::Struct(s) => &s.fields,
        Data::Enum(e) => return Err(syn::Error::new(
            e.enum_token.span,
            "derive(Equivalence) supports structs only: an MPI datatype cannot describe an enum",
        )),
        Data::Union(u) => return Err(syn::Error::new(
            u.union_token.span,
            "derive(Equivalence) supports structs only: an MPI datatype cannot describe a union",
        )),
    };

    // (offset expression, field type) per field.
    let members: Vec<(TokenStream2, &syn::Type)> = match fields {
        Fields::Named(n) => n
            .named
            .iter()
            .map(|f| {
                let id = f.ident.as_ref().expect("named field");
                (quote!(::core::mem::offset_of!(Self, #id)), &f.ty)
            })
            .collect(),
        Fields::Unnamed(u) => u
            .unnamed
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let idx = Index::from(i);
                (quote!(::core::mem::offset_of!(Self, #idx)), &f.ty)
            })
            .collect(),
        Fields::Unit => Vec::new(),
    };

    let generic = !input.generics.params.is_empty();
    let mut generics = input.generics.clone();
    {
        let wc = generics.make_where_clause();
        for (_, ty) in &members {
            wc.predicates
                .push(parse_quote!(#ty: ::tsunagi::datatype::Equivalence));
        }
        if generic {
            wc.predicates.push(parse_quote!(Self: 'static));
        }
    }
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();

    let entries = members.iter().map(|(off, ty)| {
        quote! {
            (#off, <#ty as ::tsunagi::datatype::Equivalence>::equivalent_datatype())
        }
    });
    let build = quote! {
        ::tsunagi::datatype::__private::build_struct(
            ::core::stringify!(#name),
            ::core::mem::size_of::<Self>(),
            &[#(#entries),*],
        )
    };
    let body = if generic {
        quote! {
            ::tsunagi::datatype::__private::cached::<Self>(|| #build)
        }
    } else {
        quote! {
            static DATATYPE: ::std::sync::OnceLock<::tsunagi::datatype::DatatypeRef> =
                ::std::sync::OnceLock::new();
            DATATYPE.get_or_init(|| #build).clone()
        }
    };

    Ok(quote! {
        // SAFETY: the datatype is built from the offsets and datatypes of every field of
        // the struct (each field type implements Equivalence) and resized to the size of
        // the struct, which is what the Equivalence contract asks for.
        unsafe impl #impl_generics ::tsunagi::datatype::Equivalence for #name #ty_generics #where_clause {
            fn equivalent_datatype() -> ::tsunagi::datatype::DatatypeRef {
                #body
            }
        }
    })
}
